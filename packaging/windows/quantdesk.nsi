; QuantDesk's Windows installer (NSIS 3, Unicode).
;
; Built by packaging/pack_windows.py, which passes:
;   /DVERSION=0.1.0  /DBUNDLE=<dist\QuantDesk>  /DOUTFILE=<dist\QuantDesk-...-setup.exe>
;   /DBACKEND=cpu|cuda
; and /DSTANDIN=1 when it compiles against the Linux bundle on a Linux machine only to
; check this script (no compression, no OpenMP runtime check). makensis is run with
; -XTarget amd64-unicode: the 64-bit stub.
;
; Per-user install (no administrator rights, like VS Code's user installer): the program
; in %LOCALAPPDATA%\Programs\QuantDesk, a Start menu entry, ".gguf opens with QuantDesk"
; in HKCU\Software\Classes, an entry in Settings > Apps with an uninstaller.
; The OpenMP runtime that llama.cpp's CPU backend links must be in the bundle next to
; ggml-cpu.dll: libgomp-1.dll (with the mingw runtime) in a build cross-compiled with
; mingw-w64, vcomp140.dll (copied by pack_windows.py) in an MSVC build; this script refuses
; to build without one of them.

Unicode true
!include "MUI2.nsh"

!ifndef VERSION
  !error "pass /DVERSION=x.y.z"
!endif
!ifndef BUNDLE
  !error "pass /DBUNDLE=path\to\dist\QuantDesk (the PyInstaller folder)"
!endif
!ifndef OUTFILE
  !define OUTFILE "QuantDesk-${VERSION}-setup.exe"
!endif
!ifndef BACKEND
  !define BACKEND "cpu"
!endif

!define APP "QuantDesk"
!define PROGID "QuantDesk.gguf"
!define UNINSTALL_KEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\QuantDesk"

!ifdef STANDIN
  SetCompress off
!else
  SetCompressor /SOLID lzma
  !if ! /FileExists "${BUNDLE}\_internal\llama_cpp\lib\vcomp140.dll"
    !if ! /FileExists "${BUNDLE}\_internal\llama_cpp\lib\libgomp-1.dll"
      !error "The OpenMP runtime for llama.cpp (vcomp140.dll or libgomp-1.dll) is missing from the bundle"
    !endif
  !endif
!endif

Name "${APP} ${VERSION}"
OutFile "${OUTFILE}"
InstallDir "$LOCALAPPDATA\Programs\${APP}"
InstallDirRegKey HKCU "Software\${APP}" "InstallDir"
RequestExecutionLevel user
BrandingText "${APP} ${VERSION} (${BACKEND})"

!define MUI_ABORTWARNING
!define MUI_FINISHPAGE_RUN "$INSTDIR\QuantDesk.exe"
!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_INSTFILES
!insertmacro MUI_PAGE_FINISH
!insertmacro MUI_UNPAGE_CONFIRM
!insertmacro MUI_UNPAGE_INSTFILES
!insertmacro MUI_LANGUAGE "English"

Section "QuantDesk" SecMain
  SectionIn RO
  ; An older version's library files must not mix with this one's.
  RMDir /r "$INSTDIR\_internal"
  SetOutPath "$INSTDIR"
  File /r "${BUNDLE}\*.*"
  FileOpen $0 "$INSTDIR\install-kind" w
  FileWrite $0 "nsis$\r$\n"
  FileClose $0
  WriteUninstaller "$INSTDIR\Uninstall.exe"
  WriteRegStr HKCU "Software\${APP}" "InstallDir" "$INSTDIR"

  CreateShortcut "$SMPROGRAMS\${APP}.lnk" "$INSTDIR\QuantDesk.exe" "" "$INSTDIR\QuantDesk.exe" 0

  ; Double-clicking a .gguf opens it in QuantDesk (the window's "open this path" entry).
  WriteRegStr HKCU "Software\Classes\.gguf" "" "${PROGID}"
  WriteRegStr HKCU "Software\Classes\.gguf\OpenWithProgids" "${PROGID}" ""
  WriteRegStr HKCU "Software\Classes\${PROGID}" "" "GGUF model"
  WriteRegStr HKCU "Software\Classes\${PROGID}\DefaultIcon" "" "$INSTDIR\QuantDesk.exe,0"
  WriteRegStr HKCU "Software\Classes\${PROGID}\shell\open\command" "" '"$INSTDIR\QuantDesk.exe" "%1"'
  ; SHCNE_ASSOCCHANGED: Explorer re-reads the associations now, not after a log-out.
  System::Call 'shell32::SHChangeNotify(i 0x08000000, i 0, p 0, p 0)'

  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayName" "${APP}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "Publisher" "QuantDesk developers"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayIcon" "$INSTDIR\QuantDesk.exe"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "InstallLocation" "$INSTDIR"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "UninstallString" '"$INSTDIR\Uninstall.exe"'
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "NoModify" 1
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "NoRepair" 1
SectionEnd

Section "Uninstall"
  ; Only what the installer put there: models and chats live in %LOCALAPPDATA%\QuantDesk
  ; (the app's data folder) and stay.
  RMDir /r "$INSTDIR\_internal"
  Delete "$INSTDIR\QuantDesk.exe"
  Delete "$INSTDIR\quantdesk-cli.exe"
  Delete "$INSTDIR\install-kind"
  Delete "$INSTDIR\Uninstall.exe"
  RMDir "$INSTDIR"
  Delete "$SMPROGRAMS\${APP}.lnk"

  ReadRegStr $0 HKCU "Software\Classes\.gguf" ""
  StrCmp $0 "${PROGID}" 0 +2
    DeleteRegValue HKCU "Software\Classes\.gguf" ""
  DeleteRegValue HKCU "Software\Classes\.gguf\OpenWithProgids" "${PROGID}"
  DeleteRegKey HKCU "Software\Classes\${PROGID}"
  DeleteRegKey HKCU "${UNINSTALL_KEY}"
  DeleteRegKey HKCU "Software\${APP}"
  System::Call 'shell32::SHChangeNotify(i 0x08000000, i 0, p 0, p 0)'
SectionEnd
