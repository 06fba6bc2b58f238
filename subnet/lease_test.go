package subnet

import (
	"encoding/json"
	"net/netip"
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
		`{"PublicIP":"10.0.0.300"}`, `{"PublicIP":"fd00::1"}`, `{"PublicIP":5}`, `{"PublicIPv6":"10.0.0.1"}`,
		`{"PublicIPv6":"::ffff:10.0.0.1"}`, `{"PublicIPv6":"fe80::1%eth0"}`, `{"BackendData":{`, `[]`, `"x"`,
	} {
		var a LeaseAttrs
		if err := json.Unmarshal([]byte(s), &a); err == nil {
			t.Errorf("%s accepted as %+v", s, a)
		}
	}
}
