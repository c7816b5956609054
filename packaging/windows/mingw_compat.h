/* Included first in every C file of the mingw-w64 cross build of llama.cpp (see
 * packaging/cross_windows.py). mingw-w64 before release 11 (Debian 12 has 10) lacks the
 * THREAD_POWER_THROTTLING_STATE definitions of the Windows SDK, which ggml-cpu uses to keep
 * Windows 11 from parking its worker threads; these are the SDK's values. */
#pragma once
#ifdef _WIN32
#include <_mingw.h>
#if __MINGW64_VERSION_MAJOR < 11
typedef struct _THREAD_POWER_THROTTLING_STATE {
    unsigned long Version, ControlMask, StateMask;
} THREAD_POWER_THROTTLING_STATE;
#define THREAD_POWER_THROTTLING_CURRENT_VERSION 1
#define THREAD_POWER_THROTTLING_EXECUTION_SPEED 0x1
#endif
#endif
