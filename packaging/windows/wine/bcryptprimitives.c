/* Wine 8 has no bcryptprimitives.dll, whose ProcessPrng the Rust standard library (1.78 and
 * later) imports for random numbers; llguidance's and hf_xet's extension modules, built with
 * Rust, fail to load without it. This stand-in draws the bytes from bcrypt's system RNG,
 * which is where Windows' own ProcessPrng draws them from. Test and build environment only:
 * never part of the installer (Windows 10 and later have the DLL). */
#include <windows.h>
#include <bcrypt.h>

BOOL WINAPI standin_ProcessPrng(PBYTE buffer, SIZE_T size)
{
    while (size) {
        ULONG chunk = size > 0x40000000 ? 0x40000000 : (ULONG)size;
        if (!BCRYPT_SUCCESS(BCryptGenRandom(NULL, buffer, chunk, BCRYPT_USE_SYSTEM_PREFERRED_RNG)))
            return FALSE;
        buffer += chunk;
        size -= chunk;
    }
    return TRUE;
}
