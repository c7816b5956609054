/* Wine 8's propsys has only a stub (which aborts when called) for VariantToString, which
 * Python's _wmi module (platform.uname(), platform.win32_ver()) calls for every value it
 * reads. Test and build environment only: never part of the installer. */
#define COBJMACROS
#include <windows.h>
#include <oleauto.h>

#define STRSAFE_E_INSUFFICIENT_BUFFER ((HRESULT)0x8007007AL)

HRESULT WINAPI standin_VariantToString(const VARIANT *value, WCHAR *buffer, UINT size)
{
    VARIANT text;
    HRESULT hr;
    UINT length;

    if (!buffer || !size)
        return E_INVALIDARG;
    buffer[0] = 0;
    VariantInit(&text);
    hr = VariantChangeType(&text, (VARIANT *)value, 0, VT_BSTR);
    if (FAILED(hr))
        return hr;
    length = SysStringLen(V_BSTR(&text));
    if (length >= size) {
        VariantClear(&text);
        return STRSAFE_E_INSUFFICIENT_BUFFER;
    }
    memcpy(buffer, V_BSTR(&text), (length + 1) * sizeof(WCHAR));
    VariantClear(&text);
    return S_OK;
}
