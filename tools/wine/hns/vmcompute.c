/*
 * vmcompute.c: a simulated vmcompute.dll for weftd.exe under Wine: HNSCall, HNS's v1 API,
 * which hcsshim's hcn uses for the version (GET /globals/version). The answer is the v1
 * envelope ({"Success":…,"Output":…}) in response; see call.h.
 */
#include "call.h"

EXPORT HRESULT WINAPI HNSCall(LPCWSTR method, LPCWSTR path, LPCWSTR object, PWSTR *response)
{
	/* The path goes where the other calls put a GUID: the service reads it from there. */
	char *p = utf8(path);
	if (p == NULL)
		return HR_OUTOFMEMORY;
	PWSTR record = NULL;
	HRESULT hr = callid("HNSCall", p, 0, method, object, NULL, response, &record);
	free(p);
	if (record)
		CoTaskMemFree(record);
	return hr;
}
