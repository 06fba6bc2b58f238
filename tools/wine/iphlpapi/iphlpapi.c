/*
 * iphlpapi.c: an iphlpapi.dll for weftd.exe under Wine. weftd's host-gw reads and changes the
 * host's IP stack through the IP Helper API, and Wine 8's iphlpapi lacks GetIpInterfaceEntry,
 * SetIpInterfaceEntry, InitializeIpForwardEntry, CreateIpForwardEntry2 and
 * DeleteIpForwardEntry2. The functions weftd's host code calls (windows/host_windows.go) are
 * here, and hand their rows, as the bytes the caller passed, to the simulated HNS service
 * (internal/hnssim), which plays them on the node's simulated host, the one its simulated HNS
 * moves addresses on: it decodes the rows, answers as Windows documents and sends the rows
 * back. Every other export is forwarded to Wine's own iphlpapi, copied beside this one as
 * iphlpwine.dll (setup.sh writes the forwarders from that copy's exports): Go's net package
 * gets its adapters (GetAdaptersAddresses) from Wine, as without this DLL.
 *
 * The transport is the one of the simulated HNS DLLs (../hns/call.h): the call is named by
 * the export, the row or the address family goes as the first string (rows in hex), and the
 * answer's HRESULT field carries the function's Win32 status.
 */
#include "../hns/call.h"

typedef DWORD NETIO_STATUS;

/* Row sizes on x86-64 (netioapi.h); the service refuses a row of another size. */
#define SIZE_IPINTERFACE_ROW 168
#define SIZE_IPFORWARD_ROW2 104

/* hex writes n bytes as a UTF-16 string of hex digits in a malloc'ed buffer. */
static LPWSTR hex(const void *data, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *b = data;
	LPWSTR w = malloc((2 * n + 1) * sizeof(WCHAR));
	if (w == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		w[2 * i] = digits[b[i] >> 4];
		w[2 * i + 1] = digits[b[i] & 15];
	}
	w[2 * n] = 0;
	return w;
}

static int nibble(WCHAR c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* unhex reads a string of hex digits into a HeapAlloc'ed buffer (the process heap, which
 * FreeMibTable frees), setting *n to its length; NULL if it is not hex. */
static void *unhex(LPCWSTR w, size_t *n)
{
	size_t len = wcslen(w);
	if (len % 2)
		return NULL;
	unsigned char *b = HeapAlloc(GetProcessHeap(), 0, len / 2 ? len / 2 : 1);
	if (b == NULL)
		return NULL;
	for (size_t i = 0; i < len / 2; i++) {
		int hi = nibble(w[2 * i]), lo = nibble(w[2 * i + 1]);
		if (hi < 0 || lo < 0) {
			HeapFree(GetProcessHeap(), 0, b);
			return NULL;
		}
		b[i] = (unsigned char)(hi << 4 | lo);
	}
	*n = len / 2;
	return b;
}

/* status is an IP Helper function's Win32 status from the call's HRESULT: the service's
 * status as it is, the transport's own failures as their Win32 codes. */
static NETIO_STATUS status(HRESULT hr)
{
	switch (hr) {
	case HR_UNAVAILABLE:
		return RPC_S_SERVER_UNAVAILABLE;
	case HR_OUTOFMEMORY:
		return ERROR_NOT_ENOUGH_MEMORY;
	case HR_INVALIDARG:
		return ERROR_INVALID_DATA;
	}
	return (NETIO_STATUS)hr;
}

/* hostcall hands one call to the service: in (n bytes, or the family when in is NULL) goes
 * as the first string; the answer's bytes come back in *out (HeapAlloc'ed), if it has any. */
static NETIO_STATUS hostcall(const char *op, const void *in, size_t n, unsigned family, void **out, size_t *outlen)
{
	LPWSTR arg;
	if (in != NULL) {
		arg = hex(in, n);
	} else {
		arg = malloc(16 * sizeof(WCHAR));
		if (arg != NULL)
			swprintf(arg, 16, L"%u", family);
	}
	if (arg == NULL)
		return ERROR_NOT_ENOUGH_MEMORY;
	PWSTR result = NULL;
	NETIO_STATUS st = status(callid(op, "", 0, arg, NULL, NULL, &result, NULL));
	free(arg);
	*out = NULL;
	*outlen = 0;
	if (result != NULL) {
		if (st == NO_ERROR && result[0] != 0 && (*out = unhex(result, outlen)) == NULL)
			st = ERROR_INVALID_DATA;
		CoTaskMemFree(result);
	}
	return st;
}

/* rowcall hands a row over and writes the row the service answers back into it. */
static NETIO_STATUS rowcall(const char *op, void *row, size_t n)
{
	if (row == NULL)
		return ERROR_INVALID_PARAMETER;
	void *out;
	size_t outlen;
	NETIO_STATUS st = hostcall(op, row, n, 0, &out, &outlen);
	if (st == NO_ERROR && out != NULL && outlen == n)
		memcpy(row, out, n);
	else if (st == NO_ERROR && out != NULL)
		st = ERROR_INVALID_DATA;
	if (out != NULL)
		HeapFree(GetProcessHeap(), 0, out);
	return st;
}

/* tablecall asks for a table of a family; the caller frees it with FreeMibTable. */
static NETIO_STATUS tablecall(const char *op, unsigned short family, void **table)
{
	if (table == NULL)
		return ERROR_INVALID_PARAMETER;
	*table = NULL;
	size_t n;
	NETIO_STATUS st = hostcall(op, NULL, 0, family, table, &n);
	if (st == NO_ERROR && *table == NULL)
		st = ERROR_INVALID_DATA;
	if (st != NO_ERROR && *table != NULL) {
		HeapFree(GetProcessHeap(), 0, *table);
		*table = NULL;
	}
	return st;
}

EXPORT NETIO_STATUS WINAPI GetIpInterfaceEntry(void *row)
{
	return rowcall("GetIpInterfaceEntry", row, SIZE_IPINTERFACE_ROW);
}

EXPORT NETIO_STATUS WINAPI SetIpInterfaceEntry(void *row)
{
	return rowcall("SetIpInterfaceEntry", row, SIZE_IPINTERFACE_ROW);
}

EXPORT void WINAPI InitializeIpForwardEntry(void *row)
{
	/* It returns nothing: a row the service could not fill is left all zero. */
	if (row != NULL && rowcall("InitializeIpForwardEntry", row, SIZE_IPFORWARD_ROW2) != NO_ERROR)
		memset(row, 0, SIZE_IPFORWARD_ROW2);
}

EXPORT NETIO_STATUS WINAPI CreateIpForwardEntry2(const void *row)
{
	if (row == NULL)
		return ERROR_INVALID_PARAMETER;
	unsigned char copy[SIZE_IPFORWARD_ROW2]; /* the row is const: the answer is not written back */
	memcpy(copy, row, sizeof copy);
	return rowcall("CreateIpForwardEntry2", copy, sizeof copy);
}

EXPORT NETIO_STATUS WINAPI DeleteIpForwardEntry2(const void *row)
{
	if (row == NULL)
		return ERROR_INVALID_PARAMETER;
	unsigned char copy[SIZE_IPFORWARD_ROW2];
	memcpy(copy, row, sizeof copy);
	return rowcall("DeleteIpForwardEntry2", copy, sizeof copy);
}

EXPORT NETIO_STATUS WINAPI GetIpForwardTable2(unsigned short family, void **table)
{
	return tablecall("GetIpForwardTable2", family, table);
}

EXPORT NETIO_STATUS WINAPI GetUnicastIpAddressTable(unsigned short family, void **table)
{
	return tablecall("GetUnicastIpAddressTable", family, table);
}

/* FreeMibTable frees a table of either side: this DLL's are on the process heap, and so
 * are Wine's (its FreeMibTable frees with HeapFree on the process heap too). */
EXPORT void WINAPI FreeMibTable(void *table)
{
	if (table != NULL)
		HeapFree(GetProcessHeap(), 0, table);
}

/* WeftSimulatedHost is no IP Helper export: it tells a test, and setup.sh, that this
 * iphlpapi.dll is the simulation. */
EXPORT BOOL WINAPI WeftSimulatedHost(void)
{
	return TRUE;
}
