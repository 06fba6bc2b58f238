/*
 * bcryptprimitives.dll for Wine 8: Go 1.22+ Windows binaries get their random bytes from
 * ProcessPrng, which Wine 8 does not export, so they die at start-up. This DLL exports it
 * and forwards to advapi32's SystemFunction036 (RtlGenRandom), which Wine has.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
	/* RtlGenRandom takes a ULONG: feed it at most 4 GiB at a time. */
	while (len > 0) {
		ULONG chunk = len > 0xffffffffu ? 0xffffffffu : (ULONG)len;
		if (!SystemFunction036(data, chunk))
			return FALSE;
		data += chunk;
		len -= chunk;
	}
	/* Windows documents that ProcessPrng always returns TRUE. */
	return TRUE;
}
