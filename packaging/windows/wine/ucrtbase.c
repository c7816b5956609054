/* Wine 8's ucrtbase has only stubs (which abort when called) for C99's complex-number
 * accessors; numpy 2 calls crealf while it imports. The Microsoft x64 ABI passes an
 * _Fcomplex (8 bytes) in a register and a _Dcomplex/_Lcomplex (16 bytes, long double ==
 * double) by reference, and returns an 8-byte struct in RAX, a 16-byte one through a
 * hidden pointer. Test environment only: never part of the installer. */
#include <stdint.h>
#include <string.h>

typedef union { uint64_t bits; float f[2]; } fcomplex;
typedef struct { double d[2]; } dcomplex;

float standin_crealf(uint64_t z) { fcomplex v; v.bits = z; return v.f[0]; }
float standin_cimagf(uint64_t z) { fcomplex v; v.bits = z; return v.f[1]; }
double standin_creal(const dcomplex *z) { return z->d[0]; }
double standin_cimag(const dcomplex *z) { return z->d[1]; }
uint64_t standin_conjf(uint64_t z) { fcomplex v; v.bits = z; v.f[1] = -v.f[1]; return v.bits; }
dcomplex standin_conj(const dcomplex *z) { dcomplex r = *z; r.d[1] = -r.d[1]; return r; }
