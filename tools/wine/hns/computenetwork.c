/*
 * computenetwork.c: a simulated computenetwork.dll for weftd.exe under Wine. Every export
 * that hcsshim's hcn package binds (hcn/zsyscall_windows.go, v0.15.0) is here, since a missing
 * one makes hcn panic; each hands its call to the simulated HNS service (see call.h).
 */
#include "call.h"

typedef void *HCN_HANDLE;

EXPORT HRESULT WINAPI HcnEnumerateNetworks(LPCWSTR query, PWSTR *ids, PWSTR *record)
{
	return call("HcnEnumerateNetworks", NULL, 0, query, NULL, NULL, ids, record);
}

EXPORT HRESULT WINAPI HcnCreateNetwork(const GUID *id, LPCWSTR settings, HCN_HANDLE *object, PWSTR *record)
{
	uint64_t h;
	HRESULT hr = call("HcnCreateNetwork", id, 0, settings, NULL, &h, NULL, record);
	if (object)
		*object = (HCN_HANDLE)(uintptr_t)h;
	return hr;
}

EXPORT HRESULT WINAPI HcnOpenNetwork(const GUID *id, HCN_HANDLE *object, PWSTR *record)
{
	uint64_t h;
	HRESULT hr = call("HcnOpenNetwork", id, 0, NULL, NULL, &h, NULL, record);
	if (object)
		*object = (HCN_HANDLE)(uintptr_t)h;
	return hr;
}

EXPORT HRESULT WINAPI HcnModifyNetwork(HCN_HANDLE object, LPCWSTR settings, PWSTR *record)
{
	return call("HcnModifyNetwork", NULL, (uint64_t)(uintptr_t)object, settings, NULL, NULL, NULL, record);
}

EXPORT HRESULT WINAPI HcnQueryNetworkProperties(HCN_HANDLE object, LPCWSTR query, PWSTR *properties, PWSTR *record)
{
	return call("HcnQueryNetworkProperties", NULL, (uint64_t)(uintptr_t)object, query, NULL, NULL, properties, record);
}

EXPORT HRESULT WINAPI HcnDeleteNetwork(const GUID *id, PWSTR *record)
{
	return call("HcnDeleteNetwork", id, 0, NULL, NULL, NULL, NULL, record);
}

EXPORT HRESULT WINAPI HcnCloseNetwork(HCN_HANDLE object)
{
	return call("HcnCloseNetwork", NULL, (uint64_t)(uintptr_t)object, NULL, NULL, NULL, NULL, NULL);
}

EXPORT HRESULT WINAPI HcnEnumerateEndpoints(LPCWSTR query, PWSTR *ids, PWSTR *record)
{
	return call("HcnEnumerateEndpoints", NULL, 0, query, NULL, NULL, ids, record);
}

EXPORT HRESULT WINAPI HcnCreateEndpoint(HCN_HANDLE network, const GUID *id, LPCWSTR settings, HCN_HANDLE *endpoint, PWSTR *record)
{
	uint64_t h;
	HRESULT hr = call("HcnCreateEndpoint", id, (uint64_t)(uintptr_t)network, settings, NULL, &h, NULL, record);
	if (endpoint)
		*endpoint = (HCN_HANDLE)(uintptr_t)h;
	return hr;
}

EXPORT HRESULT WINAPI HcnOpenEndpoint(const GUID *id, HCN_HANDLE *object, PWSTR *record)
{
	uint64_t h;
	HRESULT hr = call("HcnOpenEndpoint", id, 0, NULL, NULL, &h, NULL, record);
	if (object)
		*object = (HCN_HANDLE)(uintptr_t)h;
	return hr;
}

EXPORT HRESULT WINAPI HcnModifyEndpoint(HCN_HANDLE object, LPCWSTR settings, PWSTR *record)
{
	return call("HcnModifyEndpoint", NULL, (uint64_t)(uintptr_t)object, settings, NULL, NULL, NULL, record);
}

EXPORT HRESULT WINAPI HcnQueryEndpointProperties(HCN_HANDLE object, LPCWSTR query, PWSTR *properties, PWSTR *record)
{
	return call("HcnQueryEndpointProperties", NULL, (uint64_t)(uintptr_t)object, query, NULL, NULL, properties, record);
}

EXPORT HRESULT WINAPI HcnDeleteEndpoint(const GUID *id, PWSTR *record)
{
	return call("HcnDeleteEndpoint", id, 0, NULL, NULL, NULL, NULL, record);
}

EXPORT HRESULT WINAPI HcnCloseEndpoint(HCN_HANDLE object)
{
	return call("HcnCloseEndpoint", NULL, (uint64_t)(uintptr_t)object, NULL, NULL, NULL, NULL, NULL);
}

EXPORT HRESULT WINAPI HcnEnumerateNamespaces(LPCWSTR query, PWSTR *ids, PWSTR *record)
{
	return call("HcnEnumerateNamespaces", NULL, 0, query, NULL, NULL, ids, record);
}

EXPORT HRESULT WINAPI HcnCreateNamespace(const GUID *id, LPCWSTR settings, HCN_HANDLE *object, PWSTR *record)
{
	uint64_t h;
	HRESULT hr = call("HcnCreateNamespace", id, 0, settings, NULL, &h, NULL, record);
	if (object)
		*object = (HCN_HANDLE)(uintptr_t)h;
	return hr;
}

EXPORT HRESULT WINAPI HcnOpenNamespace(const GUID *id, HCN_HANDLE *object, PWSTR *record)
{
	uint64_t h;
	HRESULT hr = call("HcnOpenNamespace", id, 0, NULL, NULL, &h, NULL, record);
	if (object)
		*object = (HCN_HANDLE)(uintptr_t)h;
	return hr;
}

EXPORT HRESULT WINAPI HcnModifyNamespace(HCN_HANDLE object, LPCWSTR settings, PWSTR *record)
{
	return call("HcnModifyNamespace", NULL, (uint64_t)(uintptr_t)object, settings, NULL, NULL, NULL, record);
}

EXPORT HRESULT WINAPI HcnQueryNamespaceProperties(HCN_HANDLE object, LPCWSTR query, PWSTR *properties, PWSTR *record)
{
	return call("HcnQueryNamespaceProperties", NULL, (uint64_t)(uintptr_t)object, query, NULL, NULL, properties, record);
}

EXPORT HRESULT WINAPI HcnDeleteNamespace(const GUID *id, PWSTR *record)
{
	return call("HcnDeleteNamespace", id, 0, NULL, NULL, NULL, NULL, record);
}

EXPORT HRESULT WINAPI HcnCloseNamespace(HCN_HANDLE object)
{
	return call("HcnCloseNamespace", NULL, (uint64_t)(uintptr_t)object, NULL, NULL, NULL, NULL, NULL);
}

EXPORT HRESULT WINAPI HcnEnumerateLoadBalancers(LPCWSTR query, PWSTR *ids, PWSTR *record)
{
	return call("HcnEnumerateLoadBalancers", NULL, 0, query, NULL, NULL, ids, record);
}

EXPORT HRESULT WINAPI HcnCreateLoadBalancer(const GUID *id, LPCWSTR settings, HCN_HANDLE *object, PWSTR *record)
{
	uint64_t h;
	HRESULT hr = call("HcnCreateLoadBalancer", id, 0, settings, NULL, &h, NULL, record);
	if (object)
		*object = (HCN_HANDLE)(uintptr_t)h;
	return hr;
}

EXPORT HRESULT WINAPI HcnOpenLoadBalancer(const GUID *id, HCN_HANDLE *object, PWSTR *record)
{
	uint64_t h;
	HRESULT hr = call("HcnOpenLoadBalancer", id, 0, NULL, NULL, &h, NULL, record);
	if (object)
		*object = (HCN_HANDLE)(uintptr_t)h;
	return hr;
}

EXPORT HRESULT WINAPI HcnModifyLoadBalancer(HCN_HANDLE object, LPCWSTR settings, PWSTR *record)
{
	return call("HcnModifyLoadBalancer", NULL, (uint64_t)(uintptr_t)object, settings, NULL, NULL, NULL, record);
}

EXPORT HRESULT WINAPI HcnQueryLoadBalancerProperties(HCN_HANDLE object, LPCWSTR query, PWSTR *properties, PWSTR *record)
{
	return call("HcnQueryLoadBalancerProperties", NULL, (uint64_t)(uintptr_t)object, query, NULL, NULL, properties, record);
}

EXPORT HRESULT WINAPI HcnDeleteLoadBalancer(const GUID *id, PWSTR *record)
{
	return call("HcnDeleteLoadBalancer", id, 0, NULL, NULL, NULL, NULL, record);
}

EXPORT HRESULT WINAPI HcnCloseLoadBalancer(HCN_HANDLE object)
{
	return call("HcnCloseLoadBalancer", NULL, (uint64_t)(uintptr_t)object, NULL, NULL, NULL, NULL, NULL);
}

EXPORT HRESULT WINAPI HcnEnumerateSdnRoutes(LPCWSTR query, PWSTR *ids, PWSTR *record)
{
	return call("HcnEnumerateSdnRoutes", NULL, 0, query, NULL, NULL, ids, record);
}

EXPORT HRESULT WINAPI HcnCreateSdnRoute(const GUID *id, LPCWSTR settings, HCN_HANDLE *object, PWSTR *record)
{
	uint64_t h;
	HRESULT hr = call("HcnCreateSdnRoute", id, 0, settings, NULL, &h, NULL, record);
	if (object)
		*object = (HCN_HANDLE)(uintptr_t)h;
	return hr;
}

EXPORT HRESULT WINAPI HcnOpenSdnRoute(const GUID *id, HCN_HANDLE *object, PWSTR *record)
{
	uint64_t h;
	HRESULT hr = call("HcnOpenSdnRoute", id, 0, NULL, NULL, &h, NULL, record);
	if (object)
		*object = (HCN_HANDLE)(uintptr_t)h;
	return hr;
}

EXPORT HRESULT WINAPI HcnModifySdnRoute(HCN_HANDLE object, LPCWSTR settings, PWSTR *record)
{
	return call("HcnModifySdnRoute", NULL, (uint64_t)(uintptr_t)object, settings, NULL, NULL, NULL, record);
}

EXPORT HRESULT WINAPI HcnQuerySdnRouteProperties(HCN_HANDLE object, LPCWSTR query, PWSTR *properties, PWSTR *record)
{
	return call("HcnQuerySdnRouteProperties", NULL, (uint64_t)(uintptr_t)object, query, NULL, NULL, properties, record);
}

EXPORT HRESULT WINAPI HcnDeleteSdnRoute(const GUID *id, PWSTR *record)
{
	return call("HcnDeleteSdnRoute", id, 0, NULL, NULL, NULL, NULL, record);
}

EXPORT HRESULT WINAPI HcnCloseSdnRoute(HCN_HANDLE object)
{
	return call("HcnCloseSdnRoute", NULL, (uint64_t)(uintptr_t)object, NULL, NULL, NULL, NULL, NULL);
}

/* WeftSimulatedHNS is no HNS export: it tells a test that this computenetwork.dll is the
 * simulation, so that a test meant for it never runs against a real HNS on Windows. */
EXPORT BOOL WINAPI WeftSimulatedHNS(void)
{
	return TRUE;
}
