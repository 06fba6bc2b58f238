package kube

import (
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/weftnet/weft/subnet"
)

// TestAnnotationsRoundTrip: what Annotations publishes is what a peer's watcher reads back.
func TestAnnotationsRoundTrip(t *testing.T) {
	cfg, err := subnet.ParseConfig([]byte(`{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`))
	if err != nil {
		t.Fatal(err)
	}
	attrs := subnet.LeaseAttrs{
		PublicIP:    netip.MustParseAddr("198.18.0.7"),
		BackendType: "vxlan",
		BackendData: json.RawMessage(`{"VNI":1,"VtepMAC":"02:00:00:00:00:07"}`),
	}
	for _, prefix := range []string{"", "example.com/weft"} {
		ann, err := Annotations(prefix, cfg, attrs)
		if err != nil {
			t.Fatalf("prefix %q: %v", prefix, err)
		}
		want := prefix
		if want == "" {
			want = DefaultAnnotationPrefix
		}
		a, err := newAnnotations(want)
		if err != nil {
			t.Fatal(err)
		}
		if ann[a.managed] != "true" {
			t.Errorf("prefix %q: %s = %q, want true", prefix, a.managed, ann[a.managed])
		}
		got, err := a.attrs(cfg, ann)
		if err != nil {
			t.Fatalf("prefix %q: reading back %v: %v", prefix, ann, err)
		}
		if !got.Equal(attrs) {
			t.Errorf("prefix %q: read back %+v, want %+v", prefix, got, attrs)
		}
	}
	if _, err := Annotations("a/b/c", cfg, attrs); err == nil {
		t.Error("a prefix with two '/' was accepted")
	}
}
