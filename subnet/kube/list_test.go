package kube_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/kube"
)

// testList: List reads the config file and, as the weft service account, the lease of every
// Node that publishes one under the prefix, by name, with why a lease cannot be read; Nodes
// without the annotation or a podCIDR are not peers and are left out. It needs no node name.
func testList(t *testing.T, c *cluster) {
	const prefix = "list.weft.test"
	managed, bt, _, ip := annotationKeys(prefix)
	createNode(t, c.admin, "list-b", peerAnnotations(prefix, vxlanAttrs("192.0.2.21")), "10.42.21.0/24")
	createNode(t, c.admin, "list-a", map[string]string{managed: "true", bt: "vxlan", ip: "not-an-ip"}, "10.42.22.0/24")
	createNode(t, c.admin, "list-unmanaged", nil, "10.42.23.0/24")
	createNode(t, c.admin, "list-no-podcidr", peerAnnotations(prefix, vxlanAttrs("192.0.2.24")))

	cfg, leases, err := kube.List(ctxFor(t), kube.Config{REST: c.weft, AnnotationPrefix: prefix, NetConfPath: writeNetConf(t, netConf)})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Network != netip.MustParsePrefix("10.42.0.0/16") {
		t.Errorf("config %+v, want the file's", cfg)
	}
	var got []string
	for _, l := range leases {
		s := fmt.Sprintf("%s %s %s", l.Node, l.Lease.Subnet, l.Lease.Attrs.PublicIP)
		if l.Err != nil {
			s += " error: " + l.Err.Error()
		}
		got = append(got, s)
	}
	want := []string{
		`list-a 10.42.22.0/24 invalid IP error: annotation ` + prefix + `/public-ip="not-an-ip": not an IP address`,
		"list-b 10.42.21.0/24 192.0.2.21",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("leases:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if l := leases[len(leases)-1]; l.Lease.Attrs.BackendType != subnet.BackendVXLAN || l.Lease.Created == 0 {
		t.Errorf("lease of list-b: %+v, want its backend and its Node's age", l.Lease)
	}
}
