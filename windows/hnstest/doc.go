// Package hnstest is test support for the HNS data plane: HNS, an in-memory HNS that refuses
// what HNS refuses, answers with HNS's HRESULTs and error records (windows.Error), plays what
// HNS does to the host (the vSwitch, the blip, a reboot, a restart of the service), records
// every request and counts every call; and Host, an in-memory host IP stack.
//
// Only tests import it: weftd's production code talks to HNS through windows.Client, which
// the hcn adapter implements on Windows.
//
// # What it enforces, and where each rule comes from
//
// hcsshim is github.com/Microsoft/hcsshim v0.15.0; flannel is flannel-io/flannel's Windows
// backends (backend/vxlan/vxlan_windows.go, backend/hostgw/hostgw_windows.go). The codes are
// winerror.h's, as golang.org/x/sys/windows names them; which code HNS answers a given
// refusal with is verified only where a source is named.
//
//   - A subnet with an address prefix needs routes with a next hop, one of them a default
//     route: hcn refuses it before calling HNS, with its own error (hcsshim
//     hcn/hcnnetwork.go, createNetwork).
//   - An endpoint to create must not name a namespace: hcn refuses it (hcsshim
//     hcn/hcnendpoint.go, createEndpoint).
//   - A network looked up by a name no network has: hcn's own NetworkNotFoundError after an
//     empty listing (hcsshim hcn/hcnnetwork.go, GetNetworkByName).
//   - Attaching an endpoint to a namespace takes {"EndpointId": …} settings (hcsshim
//     hcn/hcnnamespace.go, AddNamespaceEndpoint); a namespace lists its endpoints as
//     {"ID": …} (NamespaceResourceEndpoint). Other settings: HCN_E_INVALID_JSON (the code is
//     unverified).
//   - A second attachment of an endpoint to a namespace fails with
//     HCN_E_ENDPOINT_NAMESPACE_ALREADY_EXISTS, "This requested operation is invalid as
//     endpoint is already part of a network namespace.": the code's text in Microsoft's HCN
//     error code table (learn.microsoft.com, virtualization/api/hcn/Reference/hcnhresult),
//     and the text terway's v2 host attachment matches (AliyunContainerService/terway
//     pkg/windows/apis/network_bridge.go, AddBridgeHCNNetwork). That HNS answers this code
//     here is unverified. (flannel v0.28.10's host-gw attaches through v1's HostAttach and
//     matches another code's text, HCN_E_ENDPOINT_ALREADY_ATTACHED's "This endpoint is
//     already attached to the switch." (pkg/backend/hostgw/hostgw_windows.go; flannel issue
//     1391, PR 1392), which Calico's log shows as 0x803b0014 (projectcalico/calico issue
//     4280).)
//   - HNS v1's host attachment (HostAttach: hcsshim internal/hns/hnsendpoint.go,
//     HNSEndpoint.HostAttach, {"SystemType":"Host","CompartmentId":1}, as flanneld's
//     host-gw and Microsoft's SDN scripts send it) puts the endpoint in the host's
//     HostDefault namespace, made if HNS has none, and the host gets its vNIC (that v1's
//     compartment 1 and that namespace are one place is unverified, as in hnssim). An
//     endpoint attached already answers HCN_E_ENDPOINT_ALREADY_ATTACHED with its text, which
//     flanneld matches.
//   - RemoteSubnetRoute and HostRoute policies need HNS 9.2 (hcsshim hcn/hcnglobals.go,
//     RemoteSubnetVersion, HostRouteVersion).
//   - An Overlay network gets a DR MAC (a DrMacAddress network policy) and reports its
//     ManagementIP only once the host vNIC is back after its creation (flannel's vxlan
//     waits for the management IP and publishes the DR MAC as the VtepMAC). The 00-15-5D
//     prefix is Hyper-V's MAC range.
//   - An Overlay subnet needs a VSID policy of 4096 or more (flannel refuses VNIs below
//     4096 on Windows). The code, HCN_E_INVALID_POLICY, is unverified.
//   - Networks made with EnableNonPersistent are gone after a reboot (hcsshim
//     hcn/hcnnetwork.go, NetworkFlags; flannel makes its networks so). That a restart of
//     the HNS service drops them too, and that a stopped HNS answers
//     HCN_E_MANAGER_STOPPED, are unverified.
//   - A network with an IPv6 subnet needs HNS 11.10 or later (hcsshim hcn/hcnglobals.go,
//     IPv6DualStackVersion; the code it answers with, HCN_E_INVALID_IP here, is unverified).
//   - Unknown network and endpoint IDs: HCN_E_NETWORK_NOT_FOUND, HCN_E_ENDPOINT_NOT_FOUND;
//     an unknown namespace: ERROR_NOT_FOUND. hcsshim's IsElementNotFoundError tests for the
//     latter; which object answers which code is unverified.
//
// Unverified, each a guess at what HNS does that weft must survive either way:
//   - a second network of a name (HCN_E_NETWORK_ALREADY_EXISTS);
//   - a second RemoteSubnetRoute to a destination, a second HostRoute
//     (HCN_E_POLICY_ALREADY_EXISTS);
//   - removing a policy matches it by its JSON value, whatever the key order and spacing,
//     and removing one the network lacks fails (HCN_E_POLICY_NOT_FOUND);
//   - a local endpoint with an address outside the network's subnets (each address must lie
//     in the subnet of its family; HCN_E_INVALID_IP), a remote Overlay
//     endpoint without a ProviderAddress policy (HCN_E_INVALID_POLICY), two endpoints of an
//     address on a network (HCN_E_ADDR_INVALID_OR_RESERVED);
//   - HNS assigns every ID (a request naming one: E_INVALIDARG); a network or namespace needs
//     schema version 2.0;
//   - a query answers with the subnets' policies (Options.QueryOmitsSubnetPolicies plays an
//     HNS that does not, as reported for some versions);
//   - the host sees a network's adapter move to a vSwitch vNIC "vEthernet (<adapter>)",
//     and an endpoint attached to the host namespace as a vNIC "vEthernet (<endpoint>)"
//     holding all of the endpoint's addresses (both families' on a dual-stack network);
//     forwarding is per interface and family, as MIB_IPINTERFACE_ROW has it.
package hnstest
