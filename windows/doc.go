// Package windows is the HNS (Host Networking Service) data plane of weftd on Windows.
//
// Almost all of it is OS-neutral, so it is built and tested on Linux:
//   - weft's model of the HNS v2 objects it uses (HostComputeNetwork, HostComputeEndpoint,
//     HostComputeNamespace, their policies), whose JSON is HNS's own;
//   - Client, the few HNS calls the plane makes, and Host, the host's interfaces and
//     route table of both families as host-gw needs them (their in-memory doubles are in
//     hnstest);
//   - Plane, a backend.Plane: Prepare creates or adopts the VXLAN Overlay network (or the
//     host-gw L2Bridge network) once the lease acquisition has chosen the node's subnet,
//     before the lease is published; Apply converges peers, by a diff of a listing on a
//     full update and from its model of what it programmed otherwise. plane.go holds what
//     both modes share (the networks' life, Apply); netmodel.go the one model of the
//     network, which a dual-stack node's two families share (their Plane and its IPv6 view);
//     watch.go the one look at the network that serves every family's Watch; overlay.go
//     vxlan's Overlay network and its peers (RemoteSubnetRoute policies or remote
//     endpoints); hostgw.go host-gw's L2Bridge network, its host endpoint and the host's
//     routes.
//
// Only the adapters are Windows-only: the hcsshim hcn client (hcn_windows.go) and the IP
// Helper route table (host_windows.go).
package windows
