"""Linux packages of the frozen bundle: a ``.deb`` and a portable ``.tar.gz``.

Why ``dpkg-deb`` and not a packaging framework (fpm, debhelper): the bundle is already
built, so a ``.deb`` is only a file tree plus ``DEBIAN/control``; ``dpkg-deb`` is in every
Debian/Ubuntu system and needs no source package. ``--root-owner-group`` makes the files
root-owned without fakeroot.

The ``Depends`` line is computed, not guessed: every ELF file in the bundle names the
shared libraries it needs (``NEEDED``); those the bundle does not carry are looked up on
the build machine (``ldconfig -p`` → file → ``dpkg -S`` → package). That covers what Qt's
xcb platform links (libxcb-cursor0 and friends) and libgomp for llama.cpp. A few
libraries are opened with ``dlopen`` at run time and named by hand
(:data:`DLOPENED_PACKAGES`). ``libc6 (>= X)`` uses the newest glibc symbol version any
bundled file needs, which is also printed: the oldest distribution the package runs on.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LINUX = HERE / "linux"
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # run by the system's Python: this checkout's app package
    sys.path.insert(0, str(ROOT))

from models.foundation.system_programs import require_program  # noqa: E402
ASSETS = ROOT / "assets"

DEB_NAME = "quantdesk"
INSTALL_DIR = "/opt/quantdesk"
DESKTOP_ID = "io.github.quantdesk.QuantDesk"
MAINTAINER = "QuantDesk developers <quantdesk@users.noreply.github.com>"

#: Packages for libraries Qt opens with dlopen (never in a NEEDED list): D-Bus for the
#: desktop portal and accessibility, xkbcommon-x11 for the keyboard on X11, EGL/GL for
#: the xcb GL integration, fontconfig for fonts.
DLOPENED_PACKAGES = ["libdbus-1-3", "libxkbcommon-x11-0", "libegl1", "libgl1", "libfontconfig1"]

ELF_MAGIC = b"\x7fELF"


def _is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == ELF_MAGIC
    except OSError:
        return False


def elf_files(bundle: Path) -> list[Path]:
    """Every ELF file in the bundle (executables, shared libraries, Python extensions)."""
    return sorted(p for p in bundle.rglob("*")
                  if p.is_file() and not p.is_symlink() and _is_elf(p))


def _tool(name: str, package: str, what: str) -> str:
    """The full path of the build tool ``name`` (``ldconfig`` is in ``/sbin``, off an
    ordinary user's PATH), or the sentence naming the Debian package to install."""
    return require_program(name, what, f"Install it (Debian: sudo apt install {package}).")


def _readelf(args: list[str], path: Path) -> str:
    readelf = _tool("readelf", "binutils", "read the bundle's ELF files")
    return subprocess.run([readelf, *args, str(path)], check=True, capture_output=True,
                          text=True, env=dict(os.environ, LC_ALL="C")).stdout


def needed_libraries(path: Path) -> set[str]:
    """The ``NEEDED`` sonames of one ELF file."""
    return set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", _readelf(["-d"], path)))


def glibc_versions(path: Path) -> set[tuple[int, ...]]:
    """The ``GLIBC_x.y`` symbol versions one ELF file requires."""
    found = re.findall(r"Name: GLIBC_([0-9.]+)", _readelf(["-V"], path))
    return {tuple(int(n) for n in v.split(".")) for v in found}


def newest_glibc(files: list[Path]) -> tuple[str, Path]:
    """The newest glibc symbol version needed by any of ``files``, and the file needing it."""
    best: tuple[tuple[int, ...], Path] = ((0,), files[0])
    for path in files:
        for version in glibc_versions(path):
            if version > best[0]:
                best = (version, path)
    return ".".join(map(str, best[0])), best[1]


def system_library_paths() -> dict[str, str]:
    """soname → path of the x86-64 / native libraries the build machine's loader knows."""
    ldconfig = _tool("ldconfig", "libc-bin", "list the system's shared libraries")
    out = subprocess.run([ldconfig, "-p"], check=True, capture_output=True, text=True).stdout
    paths: dict[str, str] = {}
    for line in out.splitlines()[1:]:
        match = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)", line)
        if match and ("x86-64" in match.group(2) or "64bit" in match.group(2)
                      or "x86" not in match.group(2)):
            paths.setdefault(match.group(1), match.group(3))
    return paths


def owning_package(path: str) -> str | None:
    """The Debian package that installed ``path`` (symlinks resolved), or None."""
    dpkg = _tool("dpkg", "dpkg", "find which package holds a library")
    for candidate in (path, os.path.realpath(path)):
        result = subprocess.run([dpkg, "-S", candidate], capture_output=True, text=True)
        if result.returncode == 0:
            return result.stdout.split(":", 1)[0].strip()
        # usrmerge: /lib/x86_64-linux-gnu/... is recorded as /usr/lib/... or the reverse
        alt = candidate[4:] if candidate.startswith("/usr/") else "/usr" + candidate
        result = subprocess.run([dpkg, "-S", alt], capture_output=True, text=True)
        if result.returncode == 0:
            return result.stdout.split(":", 1)[0].strip()
    return None


def package_for_soname(soname: str) -> str | None:
    """Debian's package name for a library the build machine lacks, by Debian policy
    §8.1: ``libfoo.so.1`` is in ``libfoo1``, ``libfoo2.so.1`` in ``libfoo2-1``."""
    match = re.fullmatch(r"(lib[\w+.-]*?)\.so\.(\d+)(?:\.\d+)*", soname)
    if match is None:
        return None
    name, major = match.group(1).lower().replace("_", "-"), match.group(2)
    return f"{name}-{major}" if name[-1].isdigit() else f"{name}{major}"


def system_dependencies(bundle: Path, files: list[Path]) -> tuple[list[str], list[str]]:
    """The packages the bundle needs from the system, and sonames whose package is only
    guessed from the name (the build machine does not have them installed)."""
    bundled = {p.name for p in bundle.rglob("*.so*")}
    wanted: set[str] = set()
    for path in files:
        wanted |= needed_libraries(path)
    external = sorted(wanted - bundled)
    known = system_library_paths()
    packages: set[str] = set()
    unresolved: list[str] = []
    for soname in external:
        package = owning_package(known[soname]) if soname in known else None
        if package is None:
            package = package_for_soname(soname)
            unresolved.append(f"{soname} -> {package}")
        if package is not None and package != "libc6":
            packages.add(package.split(":")[0])  # drop the ":amd64" multiarch suffix
    return sorted(packages | set(DLOPENED_PACKAGES)), unresolved


def deb_architecture() -> str:
    dpkg = _tool("dpkg", "dpkg", "name the package's architecture")
    return subprocess.run([dpkg, "--print-architecture"], check=True, capture_output=True,
                          text=True).stdout.strip()


def _link_tree(src: Path, dst: Path) -> None:
    """Copy a tree with hard links (fast, no extra disk), keeping symlinks as symlinks."""
    shutil.copytree(src, dst, symlinks=True, copy_function=os.link)


def _install_file(src: Path, dst: Path, mode: int = 0o644) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    dst.chmod(mode)


def _package_version(info: dict) -> str:
    # Debian versions may not contain "+" local parts from setuptools_scm-style versions
    # in a way dpkg accepts everywhere; keep digits, dots and tildes.
    return re.sub(r"[^0-9A-Za-z.~]", "~", info["app_version"])


def build_deb(bundle: Path, info: dict, dist: Path) -> Path:
    """``dist/quantdesk_<version>_<arch>.deb``: /opt/quantdesk, /usr/bin, menu entry, MIME."""
    print("==> Packing the .deb", flush=True)
    stage = ROOT / "build" / "deb"
    shutil.rmtree(stage, ignore_errors=True)
    opt = stage / INSTALL_DIR.lstrip("/")
    opt.parent.mkdir(parents=True)
    _link_tree(bundle, opt)
    (opt / "install-kind").write_text("deb\n")
    usr = stage / "usr"
    (usr / "bin").mkdir(parents=True)
    (usr / "bin" / "quantdesk").symlink_to(f"{INSTALL_DIR}/quantdesk")
    _install_file(LINUX / "quantdesk.desktop", usr / "share/applications" / f"{DESKTOP_ID}.desktop")
    _install_file(LINUX / "quantdesk-mime.xml", usr / "share/mime/packages/quantdesk.xml")
    icon = ASSETS / "icons" / "quantdesk.svg"
    _install_file(icon, usr / "share/icons/hicolor/scalable/apps/quantdesk.svg")
    _install_file(icon, usr / "share/icons/hicolor/scalable/mimetypes/application-x-gguf.svg")
    _install_file(LINUX / "copyright", usr / "share/doc" / DEB_NAME / "copyright")

    files = elf_files(bundle)
    glibc, glibc_file = newest_glibc(files)
    packages, unresolved = system_dependencies(bundle, files)
    print(f"    {len(files)} ELF files; newest glibc symbol needed: GLIBC_{glibc} "
          f"({glibc_file.relative_to(bundle)})", flush=True)
    if unresolved:
        print(f"    not installed here, package guessed from the name: {', '.join(unresolved)}",
              flush=True)
    depends = [f"libc6 (>= {glibc})", *packages]
    installed_kib = sum(p.stat().st_size for p in stage.rglob("*")
                        if p.is_file() and not p.is_symlink()) // 1024
    control = LINUX.joinpath("control.in").read_text().format(
        package=DEB_NAME, version=_package_version(info), arch=deb_architecture(),
        maintainer=MAINTAINER, installed_size=installed_kib, depends=", ".join(depends),
        backend=info["backend"])
    (stage / "DEBIAN").mkdir()
    (stage / "DEBIAN" / "control").write_text(control)
    print("    Depends: " + ", ".join(depends), flush=True)

    out = dist / f"{DEB_NAME}_{_package_version(info)}_{deb_architecture()}.deb"
    out.unlink(missing_ok=True)
    # zstd: several times faster to pack than xz for a few percent more size; dpkg has read
    # it since Debian 12 / Ubuntu 21.10.
    dpkg_deb = _tool("dpkg-deb", "dpkg", "pack the .deb")
    subprocess.run([dpkg_deb, "--root-owner-group", "-Zzstd", "-z9", "--build",
                    str(stage), str(out)], check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(stage)
    return out


def build_tarball(bundle: Path, info: dict, dist: Path) -> Path:
    """``dist/QuantDesk-<version>-linux-<arch>-<backend>.tar.gz``: unpack anywhere and run."""
    print("==> Packing the .tar.gz", flush=True)
    arch = os.uname().machine
    out = dist / f"QuantDesk-{info['app_version']}-linux-{arch}-{info['backend']}.tar.gz"
    kind = ROOT / "build" / "install-kind"
    kind.write_text("tar\n")

    def root_owned(member: tarfile.TarInfo) -> tarfile.TarInfo:
        member.uid = member.gid = 0
        member.uname = member.gname = ""
        return member

    with tarfile.open(out, "w:gz", compresslevel=6) as tar:
        tar.add(bundle, arcname="QuantDesk", filter=root_owned)
        tar.add(kind, arcname="QuantDesk/install-kind", filter=root_owned)
    return out
