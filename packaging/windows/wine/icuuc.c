/* Wine 8 has no icuuc.dll (Windows 10's own ICU), which Qt 6's QtCore imports for
 * QStringConverter's extra encodings. This stand-in has no converters at all: ucnv_open
 * fails, ucnv_countAvailable is 0, so Qt offers only the encodings it implements itself
 * (UTF-8/16/32, Latin-1, the system code page). Test and build environment only: never
 * part of the installer. */
#include <stdint.h>

#define U_FILE_ACCESS_ERROR 4

void *standin_ucnv_open(const char *name, int *error)
{
    (void)name;
    if (error && *error <= 0)
        *error = U_FILE_ACCESS_ERROR;
    return 0;
}

int32_t standin_ucnv_countAvailable(void) { return 0; }
const char *standin_ucnv_getAvailableName(int32_t n) { (void)n; return 0; }
const char *standin_ucnv_getStandardName(const char *name, const char *standard, int *error)
{
    (void)name; (void)standard;
    if (error && *error <= 0)
        *error = U_FILE_ACCESS_ERROR;
    return 0;
}

/* Every other import takes a converter, which ucnv_open never hands out. */
intptr_t standin_ucnv_unreachable(void) { return 0; }
