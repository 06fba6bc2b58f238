// Package hnssim is a simulated HNS service for weftd.exe under Wine: it answers the calls
// of the thin computenetwork.dll and vmcompute.dll of tools/wine/hns, which hcsshim's hcn
// package loads as it would Windows' own, with the rules of the in-memory HNS (hnstest),
// and those of tools/wine/iphlpapi's iphlpapi.dll on the HNS's simulated host.
//
// It is a test double: only tests import it (e2e's Wine nodes, the windows package's tests
// under Wine, hcsshim's own tests in TestHcsshimConformance), which is why it lives under
// internal with the other test servers rather than beside the Windows data plane.
//
// It decodes every request by HNS's own JSON schema (the structs of schema.go, written from
// hcsshim's hcn types), strictly: an unknown field or a wrong shape is refused with
// HCN_E_INVALID_JSON, as a request weft's model would let through but HNS would not. It
// answers with HNS's HRESULTs and error records, results as HNS's JSON, and opaque handles.
//
// # What it adds to the in-memory HNS's rules, and where each comes from
//
// hcsshim is github.com/Microsoft/hcsshim v0.15.0. The rules of hnstest (its doc names their
// sources) apply unchanged behind these.
//
//   - Every function hcn binds from computenetwork.dll is exported, since hcn panics on a
//     missing one (hcsshim hcn/zsyscall_windows.go; seen under Wine).
//   - A successful call leaves the error record NULL: hcn's checkForErrors takes any
//     non-empty record for an error, whatever the HRESULT (hcsshim hcn/hcnerrors.go). A
//     failed one returns the HRESULT and a record {"Error":…,"ErrorMessage":…}; that HNS's
//     record has that shape is unverified (it is the Host Compute Service's, hcsshim
//     internal/hcs/errors.go).
//   - Results and records are UTF-16 strings hcn frees with CoTaskMemFree (hcsshim
//     internal/interop, ConvertAndFreeCoTaskMemString).
//   - HNSCall answers HNS v1 in its envelope {"Success":…,"Error":…,"Output":…} (hcsshim
//     internal/hns/hnsnetwork.go, hnsResponse; hcn/hcnglobals.go, GetGlobals): see "HNS v1"
//     below. A path or method it does not simulate answers Success false.
//   - Create*, Open* hand out handles, Query*Properties and Modify* take them; a handle is
//     opaque and stands for one object until Close*. A handle that is not open answers
//     E_INVALIDARG: unverified (HNS may answer E_HANDLE; hcn never uses a closed one).
//   - Create* ignores the GUID argument: hcn passes the zero GUID (hcsshim
//     hcn/hcnnetwork.go, createNetwork); the ID is the one the document names, or one HNS
//     assigns (hnstest's doc has the rule).
//   - Enumerate* reads hcn's HostComputeQuery {"SchemaVersion","Flags","Filter"}, whose Filter
//     is a JSON object in a string (hcsshim hcn/hcn.go, defaultQuery), and keeps the objects
//     whose answer (below) has every field of the filter: hcn writes ID and Name
//     (GetNetworkByID/ByName) and VirtualNetwork, an endpoint's HostComputeNetwork
//     (ListEndpointsOfNetwork), all strings; a value of another JSON type (a number, a
//     bool, an object) is compared as a JSON value. Field names are matched without regard
//     to case, as Go's JSON reads them; that HNS compares string values so too is
//     unverified.
//   - Query*Properties answers the object as HNS's JSON (hcn decodes it into its types):
//     the document its create carried, under the in-memory HNS's model of it (documents.go).
//     The model's fields (ID, network, namespace, policies, addresses, MAC, what HNS added
//     or assigned) are the answer's; what the model has no field for (an endpoint's Routes,
//     Health) comes back as sent. HNS echoes the request: the win-overlay and win-bridge
//     plugins take hcnEndpoint.Routes[0] from the answer to their create
//     (containernetworking/plugins v1.9.0, pkg/hns/endpoint_windows.go). Each network
//     reports the ManagementIP hnstest was given: in the e2e test, the node's real
//     underlay address.
//   - HcnModifyEndpoint takes {"ResourceType":"Policy","RequestType":…,"Settings":
//     {"Policies":[…]}} (hcsshim hcn/hcnendpoint.go, ApplyPolicy, ModifyEndpointSettings), the
//     policies decoded as at creation; hnstest's ModifyEndpoint has the rules. A "Port"
//     request (a VM's switch port): E_NOTIMPL, not simulated.
//   - HcnDeleteNamespace deletes a namespace (containerd's sandbox removal,
//     pkg/netns/netns_windows.go; hcsshim hcn/hcnnamespace.go, Delete).
//   - SDN routes and load balancers, which weft never makes, are kept as the documents
//     their creates carried (standalone.go), decoded strictly by hcsshim's
//     HostComputeRoute and HostComputeLoadBalancer, and answered with their ID. A create may
//     name the ID and the object keeps it: hcsshim re-creates a route or load balancer with
//     its old ID to change its endpoints (hcn/hcnroute.go, hcnloadbalancer.go, AddEndpoint,
//     RemoveEndpoint) and deletes it by that ID afterwards (hcn/hcnroute_test.go,
//     TestRouteAddRemoveEndpoint). Each endpoint they name must exist
//     (HCN_E_ENDPOINT_NOT_FOUND), their addresses parse (HCN_E_INVALID_IP), a DSR load
//     balancer needs DSRVersion (a distribution by source IP is taken at every version:
//     standalone.go says why), and
//     HcnModifyLoadBalancer, which takes the whole document (hcsshim's Update),
//     ModifyLoadbalancerVersion (hcsshim hcn/hcnglobals.go; HCN_E_REQUEST_UNSUPPORTED
//     otherwise). HcnModifySdnRoute answers E_NOTIMPL: "HCNRoute doesn't implement modify
//     functionality" (hcsshim hcn/hcnroute.go). An unknown route or load balancer:
//     ERROR_NOT_FOUND. The codes, and what HNS does with a route or load balancer whose
//     endpoint goes, are unverified.
//   - Requests are decoded by HNS's schema (schema.go), strictly: a field the schema lacks,
//     a value of the wrong type or trailing data is refused with HCN_E_INVALID_JSON, and so
//     is a namespace attachment that is not {"EndpointId": …} (hcsshim hcn/hcnnamespace.go,
//     AddNamespaceEndpoint). That HNS refuses unknown fields, and with that code, is
//     unverified: the simulation is stricter than what is known, so that weft sends only
//     what HNS's schema names.
//   - A call while HNS is stopped, or while the service is unreachable, fails:
//     HCN_E_MANAGER_STOPPED from the service (hnstest.Stop), RPC_S_SERVER_UNAVAILABLE from
//     the DLL when it cannot reach the service. Both codes are unverified for HNS.
//
// # HNS v1
//
// v1 is another view of the same objects, as on Windows: what v1 makes, v2 lists, and the
// reverse. Each v1 request becomes the v2 calls hcn would make for it, through the same
// rules, and each v2 answer is read back into v1's documents, whose fields are those of
// hcsshim's v1 types (internal/hns: HNSNetwork, HNSEndpoint, EndpointAttachDetachRequest;
// the v1 wrappers there write the paths and methods).
//
//   - Paths: GET /globals/version; GET /networks/ (all), GET, DELETE /networks/<id>, POST
//     /networks/ (create); the same for /endpoints/, and POST /endpoints/<id>/attach and
//     /detach; GET /endpointstats/<id>; GET, POST, DELETE /accelnet/. Methods and collection
//     names are matched without regard to case, IDs as v2 matches them.
//   - A network: Subnets' AddressPrefix is the v2 subnet's IpAddressPrefix in a Static Ipam,
//     GatewayAddress its default route's next hop (hcn's own v1 check wants one for every
//     prefix, hcsshim internal/hns/hnsnetwork.go, Create); NetworkAdapterName is the
//     NetAdapterName policy; MacPools the MacPool's ranges; DNSServerList and DNSSuffix,
//     comma-separated, the Dns ServerList and Search. Answers add ManagementIP (the
//     ProviderAddress policy HNS adds, which flannel's host-gw waits for;
//     pkg/backend/hostgw/hostgw_windows.go), DrMacAddress and Flags, which Get-HnsNetwork
//     shows of v1 networks (kubernetes-sigs sig-windows-dev-tools pull 184).
//   - An endpoint: VirtualNetwork is HostComputeNetwork, or found by VirtualNetworkName;
//     IPAddress and PrefixLength (IPv6Address, IPv6PrefixLength) the IpConfigurations,
//     GatewayAddress (GatewayAddressV6) a default route; DNSServerList, DNSSuffix and
//     DNSDomain the Dns ServerList, Search and Domain (containernetworking/plugins writes the
//     same endpoint both ways: pkg/hns/endpoint_windows.go, GenerateHnsEndpoint and
//     GenerateHcnEndpoint); IsRemoteEndpoint the remote flag. An address given without a
//     prefix length takes its subnet's, and an answer without a default route reports the
//     subnet's gateway, as HNS answered an endpoint it gave an address (hcsshim issue 1746).
//     Namespace, SharedContainers and State are HNS's to report, and so is a network's
//     ManagementIP: a request naming them is refused; so is one with fields whose effect is
//     not simulated (a network's SourceMac, DNSServerCompartment, AutomaticDNS; an
//     endpoint's EnableInternalDNS, DisableICC, EnableLowMetric, EncapOverhead). State is 2 (Attached) while the endpoint is in a namespace or attached to a
//     container, 1 (Created) otherwise (hcsshim's EndpointState); that HNS reports these
//     values so is unverified.
//   - Policies, v1's {"Type":…, settings…} and v2's {"Type":…, "Settings":{…}}: PA is
//     ProviderAddress, OutBoundNAT's ExceptionList is Exceptions and VIP VirtualIP, NAT is
//     PortMapping with its protocol by number (containernetworking/plugins
//     pkg/hns/netconf_windows.go writes these pairs for its two API versions); VSID and
//     VLAN keep their value as IsolationId, ROUTE is SDNRoute (hcsshim's v1 and v2 policy
//     types, internal/hns/hnspolicy.go, hnspolicylist.go, hcn/hcnpolicy.go); every other type
//     keeps its name and fields.
//   - HostAttach (SystemType Host) of compartment 1, the host's own
//     (NET_IF_COMPARTMENT_ID_PRIMARY, ifdef.h), attaches the endpoint to the v2 namespace of
//     type HostDefault, "host namespaces in the default compartment" (hcsshim
//     hcn/hcnnamespace.go), and makes one if there is none, as v2 callers attaching a
//     host-gw bridge endpoint do (they list {"IsDefault":true} namespaces and create a
//     HostDefault one when none is listed); the host sees the endpoint's vNIC as for a v2
//     attachment. Another compartment is the namespace of that NamespaceId; one no
//     namespace has: GCN_E_NETCOMPARTMENT_NOT_FOUND. A compartment of 0 is taken for 1
//     (unverified). HostDetach removes the endpoint from its namespace; one not attached:
//     HCN_E_ENDPOINT_NOT_ATTACHED (unverified). That HNS v1's compartment 1 and v2's
//     HostDefault namespace are one place is read from those sources, not seen.
//   - An endpoint in a namespace already refuses HostAttach with
//     HCN_E_ENDPOINT_ALREADY_ATTACHED, returned by HNSCall itself rather than in the
//     envelope: Calico logged "hnsCall failed in Win32: This endpoint is already attached to
//     the switch. (0x803b0014)" (projectcalico/calico issue 4280), the text flannel's
//     host-gw matches. Every attach and detach refusal is so returned (unverified for the
//     others).
//   - ContainerAttach and ContainerDetach (SystemType Container) keep the container in the
//     endpoint's SharedContainers, which hcsshim's IsAttached reads; the container's
//     compartment is HCS's, not simulated. The same container twice:
//     HCN_E_ENDPOINT_ALREADY_ATTACHED; VirtualMachine NICs: E_NOTIMPL.
//   - Other refusals are in the envelope: Success false and Error the text Windows gives
//     the code (Microsoft's HCN error code table; "The parameter is incorrect." for
//     E_INVALIDARG, as docker showed "HNS failed with error : The parameter is incorrect.",
//     docker/for-win issue 396), with the codes the v2 calls answer. A request hcsshim's v1
//     types cannot write (an unknown field) is refused as invalid JSON, as the v2 schema
//     refuses one (unverified for v1). While HNS is stopped, HNSCall itself fails.
//   - /endpointstats/<id> answers the endpoint's counters, all zero (nothing moves
//     packets), with its EndpointId; /accelnet/ keeps the management MAC list POST sets and
//     DELETE clears (hcsshim hcn/hnsv1_test.go expects both).
//   - HcnCreateNetwork and HcnCreateEndpoint take a document with no SchemaVersion as v1's
//     (hcsshim hcn/hcnv1schema_test.go hands them documents of its v1 types and expects
//     them made; every v2 type hcn writes has the field, no v1 type has); a document with
//     one is read by the v2 schema. An endpoint's VirtualNetwork (or VirtualNetworkName)
//     must be the network whose handle the call is given.
//   - GET /policylists/ and /policylists/<id> answer the load balancers as v1's policy
//     lists, one ELB policy a port mapping, and DELETE /policylists/<id> deletes one
//     (policylists.go says where that comes from).
//   - Not simulated: endpoint updates (POST /endpoints/<id>), policy lists made through v1
//     (POST /policylists/), v1 namespaces (/namespaces/).
//
// # The host's IP stack (IP Helper)
//
// The simulated iphlpapi.dll of tools/wine/iphlpapi hands over the IP Helper calls weftd's
// host code makes (windows/host_windows.go), as the rows' bytes in their x86-64 layout
// (mib.go, held to golang.org/x/sys/windows's types by mib_windows_test.go); the service
// plays them on the HNS's simulated host (hnstest.Options.Host), the one whose addresses the
// HNS moves to a vSwitch vNIC or an endpoint's, so that weftd sees what HNS did to the host
// as it would on Windows, and a test sees what weftd did there. Each answers, in the
// answer's HRESULT field, the Win32 status Microsoft documents for the function
// (learn.microsoft.com, netioapi.h), and rows in hex. Without a host: ERROR_NOT_SUPPORTED.
//   - GetUnicastIpAddressTable and GetIpForwardTable2 list the host's addresses and
//     routes of the family (AF_UNSPEC, AF_INET, AF_INET6; another: ERROR_INVALID_PARAMETER),
//     ERROR_NOT_FOUND when there is none. Addresses are manual, preferred, of infinite
//     lifetimes; LUIDs are an Ethernet interface's with the index as NetLuidIndex (the
//     simulation's).
//   - GetIpInterfaceEntry and SetIpInterfaceEntry find the interface by LUID, else by index
//     (neither, or a family not AF_INET/AF_INET6: ERROR_INVALID_PARAMETER; unknown:
//     ERROR_FILE_NOT_FOUND). Every interface has both families (unverified for vNICs). The
//     host models forwarding alone: a row sets it, and a row changing any other member
//     Windows does not ignore on a set is refused with ERROR_NOT_SUPPORTED. An IPv4 row with
//     a SitePrefixLength (Microsoft: "For IPv4, the SitePrefixLength member must be set to
//     0"), an IPv6 one with more than 128, is refused with ERROR_INVALID_PARAMETER, and
//     GetIpInterfaceEntry reports 64 for both families: wireguard-windows patches what Get
//     reports, over 32 for IPv4, before a set (tunnel/winipcfg/types.go, citing the Stack
//     Overflow question 54857292, "SetIpInterfaceEntry returns ERROR_INVALID_PARAMETER");
//     the value 64 is unverified.
//   - InitializeIpForwardEntry: infinite lifetimes, Loopback, AutoconfigureAddress,
//     Publish and Immortal true, SitePrefixLength, Metric and Protocol an illegal value
//     (Microsoft's remarks; which values, 0xFF and 0xFFFFFFFF here, is unverified), zero
//     elsewhere. CreateIpForwardEntry2 takes those illegal values as not given (metric 0,
//     MIB_IPPROTO_NETMGMT), as Windows takes wireguard-windows' routes, made without setting
//     SitePrefixLength or Protocol (tunnel/winipcfg/luid.go, AddRoute).
//   - CreateIpForwardEntry2 and DeleteIpForwardEntry2 need a destination prefix and a next
//     hop of one family, a LUID or an index, a preferred lifetime within the valid one and a
//     site prefix no longer than the destination's (ERROR_INVALID_PARAMETER; mixed families
//     so refused is unverified); an unknown interface is ERROR_NOT_FOUND, a route the host
//     has (destination, next hop, interface) ERROR_OBJECT_ALREADY_EXISTS, one it lacks
//     ERROR_NOT_FOUND on a delete. The destination is kept masked (unverified).
//   - Every other export of the DLL is Wine's own iphlpapi (the Linux namespace's view):
//     Go's net package names interfaces from GetAdaptersAddresses there.
//
// The DLLs and the service speak a small framing over TCP on loopback, one call per
// connection: a request is a little-endian uint32 length and as many bytes of fields
// separated by NUL (call, GUID, handle, first string, second string); an answer is framed
// the same, with the fields HRESULT, handle, result and error record. Numbers are decimal.
package hnssim

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
)

// maxFrame bounds a frame: HNS objects are a few KiB; a listing of thousands of IDs, less
// than a MiB.
const maxFrame = 16 << 20

// request is one call as a DLL hands it over.
type request struct {
	call   string // the export: HcnCreateNetwork, HNSCall, ...
	id     string // the GUID argument, lower case without braces; for HNSCall, the path
	handle uint64 // the handle argument
	a, b   string // the string arguments, in order (settings, query; HNSCall: method, object)
}

// answer is what the DLL returns to its caller.
type answer struct {
	hr     uint32
	handle uint64 // a handle made by a Create or Open
	result string // the properties, listing or HNSCall response
	record string // the error record, "" on success
}

func readFrame(r io.Reader) ([]byte, error) {
	var n uint32
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return nil, err
	}
	if n > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

func writeFrame(w io.Writer, fields ...string) error {
	b := []byte{0, 0, 0, 0}
	for i, f := range fields {
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, f...)
	}
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	_, err := w.Write(b)
	return err
}

func decodeRequest(b []byte) (request, error) {
	f := bytes.Split(b, []byte{0})
	if len(f) != 5 {
		return request{}, fmt.Errorf("request of %d fields, want 5", len(f))
	}
	h, err := strconv.ParseUint(string(f[2]), 10, 64)
	if err != nil {
		return request{}, fmt.Errorf("handle %q: %w", f[2], err)
	}
	return request{call: string(f[0]), id: string(f[1]), handle: h, a: string(f[3]), b: string(f[4])}, nil
}

func (a answer) write(w io.Writer) error {
	return writeFrame(w, strconv.FormatUint(uint64(a.hr), 10), strconv.FormatUint(a.handle, 10), a.result, a.record)
}
