// Package windows is the HNS (Host Networking Service) data plane of weftd on Windows.
//
// Almost all of it is OS-neutral, so it is built and tested on Linux:
//   - weft's model of the HNS v2 objects it uses (HostComputeNetwork, HostComputeEndpoint,
//     HostComputeNamespace, their policies), whose JSON is HNS's own;
//   - Client, the few HNS calls the plane makes, and MemHNS, an in-memory HNS that refuses
//     what HNS refuses and records every request;
//   - Host, the host's IPv4 interfaces and route table as host-gw needs them, and MemHost;
//   - Plane, which serves the daemon: it creates or adopts the VXLAN Overlay network (or the
//     host-gw L2Bridge network) once the node's subnet is chosen, before the lease is
//     published (see Plane.PrepareVXLAN), and converges peers by diff.
//
// Only the adapters are Windows-only: the hcsshim hcn client (hcn_windows.go) and the IP
// Helper route table (host_windows.go).
package windows
