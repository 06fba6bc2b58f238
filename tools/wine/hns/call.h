/*
 * call.h: the one thing the simulated HNS DLLs do: hand a call to the simulated HNS service
 * (internal/hnssim) over TCP on loopback, at the address in WEFT_HNS_ADDR (host:port), and
 * give its answer back as HNS does: an HRESULT, UTF-16 strings in CoTaskMemAlloc buffers
 * (which the caller frees with CoTaskMemFree), no error record on success. Thin on purpose:
 * the caller is a Go program, and a second Go runtime in its process is not supported.
 *
 * Framing (both ways): a little-endian uint32 length, then fields separated by NUL.
 * Request: call, GUID, handle, string a, string b. Answer: HRESULT, handle, result, record.
 */
#include <winsock2.h>
#include <ws2tcpip.h>
#include <windows.h>
#include <objbase.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __declspec(dllexport)

/* RPC_S_SERVER_UNAVAILABLE as an HRESULT: what a call answers while HNS does not run. */
#define HR_UNAVAILABLE ((HRESULT)0x800706BAL)
#define HR_OUTOFMEMORY ((HRESULT)0x8007000EL)
#define HR_INVALIDARG ((HRESULT)0x80070057L)

/* utf8 converts a UTF-16 string to UTF-8 in a malloc'ed buffer ("" for NULL). */
static char *utf8(LPCWSTR w)
{
	if (w == NULL)
		return _strdup("");
	int n = WideCharToMultiByte(CP_UTF8, 0, w, -1, NULL, 0, NULL, NULL);
	char *s = malloc(n > 0 ? n : 1);
	if (s == NULL)
		return NULL;
	if (n <= 0) {
		s[0] = 0;
		return s;
	}
	WideCharToMultiByte(CP_UTF8, 0, w, -1, s, n, NULL, NULL);
	return s;
}

/* wide returns n bytes of UTF-8 as a UTF-16 string in a CoTaskMemAlloc buffer. */
static PWSTR wide(const char *s, int n)
{
	int m = n > 0 ? MultiByteToWideChar(CP_UTF8, 0, s, n, NULL, 0) : 0;
	PWSTR w = CoTaskMemAlloc((m + 1) * sizeof(WCHAR));
	if (w == NULL)
		return NULL;
	if (m > 0)
		MultiByteToWideChar(CP_UTF8, 0, s, n, w, m);
	w[m] = 0;
	return w;
}

static int sendall(SOCKET s, const char *b, int n)
{
	while (n > 0) {
		int k = send(s, b, n, 0);
		if (k <= 0)
			return -1;
		b += k;
		n -= k;
	}
	return 0;
}

static int recvall(SOCKET s, char *b, int n)
{
	while (n > 0) {
		int k = recv(s, b, n, 0);
		if (k <= 0)
			return -1;
		b += k;
		n -= k;
	}
	return 0;
}

static SOCKET dial(void)
{
	static int started;
	char addr[256];
	DWORD n = GetEnvironmentVariableA("WEFT_HNS_ADDR", addr, sizeof addr);
	if (n == 0 || n >= sizeof addr)
		return INVALID_SOCKET;
	if (!started) {
		WSADATA wsa;
		if (WSAStartup(MAKEWORD(2, 2), &wsa) != 0)
			return INVALID_SOCKET;
		started = 1;
	}
	char *colon = strrchr(addr, ':');
	if (colon == NULL)
		return INVALID_SOCKET;
	*colon = 0;
	struct addrinfo hints = {0}, *res = NULL;
	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_STREAM;
	if (getaddrinfo(addr, colon + 1, &hints, &res) != 0)
		return INVALID_SOCKET;
	SOCKET s = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
	if (s != INVALID_SOCKET && connect(s, res->ai_addr, (int)res->ai_addrlen) != 0) {
		closesocket(s);
		s = INVALID_SOCKET;
	}
	freeaddrinfo(res);
	return s;
}

/* callid hands one call to the service; id is the GUID as text (or HNSCall's path).
 * Out-parameters may be NULL; they are set on success and on failure alike (handle 0,
 * result NULL, record NULL when the service sent none). */
static HRESULT callid(const char *op, const char *guid, uint64_t handle, LPCWSTR a, LPCWSTR b,
		      uint64_t *outHandle, PWSTR *result, PWSTR *record)
{
	if (outHandle)
		*outHandle = 0;
	if (result)
		*result = NULL;
	if (record)
		*record = NULL;

	char h[24];
	snprintf(h, sizeof h, "%llu", (unsigned long long)handle);
	char *sa = utf8(a), *sb = utf8(b);
	if (sa == NULL || sb == NULL) {
		free(sa);
		free(sb);
		return HR_OUTOFMEMORY;
	}
	size_t n = strlen(op) + 1 + strlen(guid) + 1 + strlen(h) + 1 + strlen(sa) + 1 + strlen(sb);
	char *req = malloc(4 + n + 1);
	if (req == NULL) {
		free(sa);
		free(sb);
		return HR_OUTOFMEMORY;
	}
	uint32_t len = (uint32_t)n;
	memcpy(req, &len, 4); /* x86-64 is little-endian */
	char *p = req + 4;
	const char *fields[5] = {op, guid, h, sa, sb};
	for (int i = 0; i < 5; i++) {
		size_t k = strlen(fields[i]);
		memcpy(p, fields[i], k);
		p += k;
		if (i < 4)
			*p++ = 0;
	}
	free(sa);
	free(sb);

	SOCKET s = dial();
	if (s == INVALID_SOCKET) {
		free(req);
		return HR_UNAVAILABLE;
	}
	int bad = sendall(s, req, (int)(4 + n));
	free(req);
	uint32_t alen = 0;
	if (bad || recvall(s, (char *)&alen, 4) || alen > (64u << 20)) {
		closesocket(s);
		return HR_UNAVAILABLE;
	}
	char *ans = malloc(alen + 1);
	if (ans == NULL) {
		closesocket(s);
		return HR_OUTOFMEMORY;
	}
	if (recvall(s, ans, (int)alen)) {
		free(ans);
		closesocket(s);
		return HR_UNAVAILABLE;
	}
	closesocket(s);
	ans[alen] = 0;

	/* hr \0 handle \0 result \0 record: the result and the record may hold no NUL. */
	char *f[4] = {ans, NULL, NULL, NULL};
	char *end = ans + alen;
	int nf = 1;
	for (char *q = ans; q < end && nf < 4; q++) {
		if (*q == 0)
			f[nf++] = q + 1;
	}
	if (nf != 4) {
		free(ans);
		return HR_INVALIDARG;
	}
	HRESULT hr = (HRESULT)strtoul(f[0], NULL, 10);
	if (outHandle)
		*outHandle = strtoull(f[1], NULL, 10);
	int rlen = (int)(f[3] - 1 - f[2]);
	int clen = (int)(end - f[3]);
	if (result && (rlen > 0 || hr >= 0))
		*result = wide(f[2], rlen);
	if (record && clen > 0)
		*record = wide(f[3], clen);
	free(ans);
	return hr;
}

/* call is callid with the GUID written as HNS's JSON writes one, lower case. */
static __attribute__((unused)) HRESULT call(const char *op, const GUID *id, uint64_t handle, LPCWSTR a, LPCWSTR b,
		    uint64_t *outHandle, PWSTR *result, PWSTR *record)
{
	char guid[40] = "";
	if (id != NULL)
		snprintf(guid, sizeof guid, "%08lx-%04x-%04x-%02x%02x-%02x%02x%02x%02x%02x%02x",
			 (unsigned long)id->Data1, id->Data2, id->Data3, id->Data4[0], id->Data4[1],
			 id->Data4[2], id->Data4[3], id->Data4[4], id->Data4[5], id->Data4[6], id->Data4[7]);
	return callid(op, guid, handle, a, b, outHandle, result, record);
}
