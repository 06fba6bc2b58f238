// Package hnstest is test support for the HNS data plane: HNS, an in-memory HNS that refuses
// what HNS refuses, plays what HNS does to the host (the vSwitch, the blip, a reboot),
// records every request and counts every call; and Host, an in-memory host IP stack.
//
// Only tests import it: weftd's production code talks to HNS through windows.Client, which
// the hcn adapter implements on Windows.
package hnstest
