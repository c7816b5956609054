/* Wine 8's mscms has only a stub (which aborts when called) for WcsCreateIccProfile, which
 * Qt 6's QtGui calls for the screen's colour profile. This one says "not supported", as
 * Windows does for a profile it cannot convert, and Qt uses sRGB. Test and build
 * environment only: never part of the installer. */
#include <windows.h>

HANDLE WINAPI standin_WcsCreateIccProfile(HANDLE profile, DWORD options)
{
    (void)profile; (void)options;
    SetLastError(ERROR_NOT_SUPPORTED);
    return NULL;
}
