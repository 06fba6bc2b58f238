package subnet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLeaseAttrsJSON(t *testing.T) {
	for _, tc := range []struct {
		name  string
		attrs LeaseAttrs
		json  string
	}{
		{"vxlan as flannel writes it",
			LeaseAttrs{PublicIP: netip.MustParseAddr("192.168.64.3"), BackendType: "vxlan", BackendData: json.RawMessage(`{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}`)},
			`{"PublicIP":"192.168.64.3","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}}`},
		{"host-gw",
			LeaseAttrs{PublicIP: netip.MustParseAddr("10.0.0.2"), BackendType: "host-gw"},
			`{"PublicIP":"10.0.0.2","PublicIPv6":null,"BackendType":"host-gw","BackendData":null}`},
		{"dual stack",
			LeaseAttrs{PublicIP: netip.MustParseAddr("10.0.0.2"), PublicIPv6: netip.MustParseAddr("fd00::2"), BackendType: "vxlan",
				BackendData: json.RawMessage(`{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}`), BackendV6Data: json.RawMessage(`{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:45"}`)},
			`{"PublicIP":"10.0.0.2","PublicIPv6":"fd00::2","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"},"BackendV6Data":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:45"}}`},
		{"with weft's node identity",
			LeaseAttrs{PublicIP: netip.MustParseAddr("10.0.0.2"), BackendType: "host-gw", NodeID: "00112233445566778899aabbccddeeff"},
			`{"PublicIP":"10.0.0.2","PublicIPv6":null,"BackendType":"host-gw","BackendData":null,"WeftNodeID":"00112233445566778899aabbccddeeff"}`},
		{"IPv6 only",
			LeaseAttrs{PublicIPv6: netip.MustParseAddr("fd00::2"), BackendType: "host-gw"},
			`{"PublicIP":"0.0.0.0","PublicIPv6":"fd00::2","BackendType":"host-gw","BackendData":null}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.attrs)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.json {
				t.Errorf("marshal:\n got %s\nwant %s", b, tc.json)
			}
			var back LeaseAttrs
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if !back.Equal(tc.attrs) {
				t.Errorf("round trip: %+v, want %+v", back, tc.attrs)
			}
		})
	}
}

func TestLeaseAttrsUnmarshalLenient(t *testing.T) {
	// Written by other software: missing and unknown keys are fine, spacing is irrelevant.
	var a LeaseAttrs
	err := json.Unmarshal([]byte(`{"PublicIP":"10.0.0.2","BackendType":"vxlan","BackendData":{ "VNI" : 1 },"Future":true}`), &a)
	if err != nil {
		t.Fatal(err)
	}
	want := LeaseAttrs{PublicIP: netip.MustParseAddr("10.0.0.2"), BackendType: "vxlan", BackendData: json.RawMessage(`{"VNI":1}`)}
	if !a.Equal(want) {
		t.Errorf("got %+v", a)
	}
}

func TestLeaseAttrsUnmarshalRejects(t *testing.T) {
	for _, s := range []string{
		`{"PublicIP":"10.0.0.300"}`, `{"PublicIP":"fd00::1"}`, `{"PublicIP":5}`, `{"PublicIPv6":5}`,
		`{"BackendData":{`, `[]`, `"x"`,
		`{"PublicIP":"10.0.0.1","BackendData":{"Pad":"` + strings.Repeat("x", MaxAttrsSize) + `"}}`, // over the limit
	} {
		var a LeaseAttrs
		if err := json.Unmarshal([]byte(s), &a); err == nil {
			t.Errorf("%s accepted as %+v", s, a)
		}
	}
}

// TestLeaseAttrsBadIPv6: a PublicIPv6 that is no IPv6 address spoils the IPv6 half only: the
// value is read, with the address kept aside, so that the IPv4 half still serves.
func TestLeaseAttrsBadIPv6(t *testing.T) {
	for _, bad := range []string{"10.0.0.1", "::ffff:10.0.0.1", "fe80::1%eth0", "fd00::zz", "fd00::/64"} {
		var a LeaseAttrs
		v := fmt.Sprintf(`{"PublicIP":"10.0.0.2","PublicIPv6":%q,"BackendType":"host-gw"}`, bad)
		if err := json.Unmarshal([]byte(v), &a); err != nil {
			t.Errorf("%s: refused whole: %v", v, err)
			continue
		}
		if a.PublicIP != netip.MustParseAddr("10.0.0.2") || a.PublicIPv6.IsValid() || a.BadPublicIPv6 != bad {
			t.Errorf("%s: read as %+v", v, a)
		}
		good := a
		good.BadPublicIPv6 = ""
		if seed := maphash.MakeSeed(); a.Equal(good) || a.Digest(seed) == good.Digest(seed) {
			t.Errorf("%s: equal to the attributes without it", v)
		}
	}
}

// TestLeaseAttrsDigest: digests are equal exactly when the attributes are Equal, over pairs of
// attribute sets that differ in one field, in the spacing of their JSON, in null against
// absent, and in where a byte sits (so that no field's end can pass for the next one's start).
func TestLeaseAttrsDigest(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	data := func(s string) json.RawMessage { return json.RawMessage(s) }
	variants := []LeaseAttrs{
		{},
		{PublicIP: v4},
		{PublicIP: netip.MustParseAddr("0.0.0.0")},
		{PublicIP: netip.MustParseAddr("::")},
		{PublicIP: v4, PublicIPv6: v6},
		{PublicIPv6: v6},
		{PublicIPv6: netip.MustParseAddr("::ffff:192.0.2.1")},
		{PublicIP: v4, BackendType: "vxlan"},
		{PublicIP: v4, BackendType: "vxlan", BackendData: data(`{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}`)},
		{PublicIP: v4, BackendType: "vxlan", BackendData: data(` { "VNI" : 1 ,` + "\n\t" + `"VtepMAC":"c6:d2:32:6f:8f:44"}`)},
		{PublicIP: v4, BackendType: "vxlan", BackendData: data(`{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:45"}`)},
		{PublicIP: v4, BackendType: "vxlan", BackendData: data(`{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44 "}`)},
		{PublicIP: v4, BackendType: "vxlan", BackendData: data(`{"k":"a \" b"}`)},
		{PublicIP: v4, BackendType: "vxlan", BackendData: data(`{"k":"a \"b"}`)},
		{PublicIP: v4, BackendType: "vxlan", BackendV6Data: data(`{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}`)},
		{PublicIP: v4, BackendType: "vxlan", BackendData: data(`null`)},
		{PublicIP: v4, BackendType: "vxlan", BackendData: data(`1`), BackendV6Data: data(`2`)},
		{PublicIP: v4, BackendType: "vxlan", BackendData: data(`12`)},
		{PublicIP: v4, BackendType: "vxlan1"},
		{PublicIP: v4, BackendType: "host-gw"},
	}
	seed := maphash.MakeSeed()
	for i, a := range variants {
		for j, b := range variants {
			if eq, same := a.Equal(b), a.Digest(seed) == b.Digest(seed); eq != same {
				t.Errorf("%d %+v and %d %+v: Equal %v, same digest %v", i, a, j, b, eq, same)
			}
		}
	}
}

// TestNodeID: an identity is made and kept beside subnet.env, read back the same, and a file
// that holds no identity is replaced.
func TestNodeID(t *testing.T) {
	path := NodeIDFile(filepath.Join(t.TempDir(), "flannel", "subnet.env"))
	id, made, err := LoadNodeID(path)
	if err != nil || !made || !validNodeID(id) {
		t.Fatalf("first LoadNodeID: %q, made %v, %v", id, made, err)
	}
	again, made, err := LoadNodeID(path)
	if err != nil || made || again != id {
		t.Errorf("LoadNodeID again: %q, made %v, %v; want %q kept", again, made, err, id)
	}
	if err := os.WriteFile(path, []byte("not an id\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if other, made, err := LoadNodeID(path); err != nil || !made || other == id || !validNodeID(other) {
		t.Errorf("LoadNodeID over a bad file: %q, made %v, %v; want a new identity", other, made, err)
	}
}

// FuzzNeedsEscape: the byte-by-byte check agrees with bytes.ContainsAny, the obvious one.
func FuzzNeedsEscape(f *testing.F) {
	for _, s := range []string{`{"VNI":1,"VtepMAC":"0e:00:00:00:00:01"}`, `{"a":"<b>"}`, "&", "\u2028", "x\u2029y",
		"\u2027", "\xe2\x80", "\xe2", "é\u00e2\u0080\u00a8", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		if got, want := needsEscape(v), bytes.ContainsAny(v, "<>&\u2028\u2029"); got != want {
			t.Errorf("needsEscape(%q) = %t, want %t", v, got, want)
		}
	})
}
