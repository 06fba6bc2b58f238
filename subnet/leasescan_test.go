package subnet

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"
)

// FuzzScanAttrs: wherever scanAttrs reads a lease value, encoding/json reads it too, into
// the same wireAttrs.
func FuzzScanAttrs(f *testing.F) {
	for _, s := range []string{
		`{"PublicIP":"192.168.64.3","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}}`,
		`{"PublicIP":"10.0.0.2","PublicIPv6":"fd00::2","BackendType":"host-gw","BackendData":null,"BackendV6Data":null}`,
		`{"PublicIP":"0.0.0.0","PublicIPv6":null,"BackendType":"wireguard","BackendData":{"PublicKey":"x=","Nested":{"a":[1,{"b":"}"}]}},"WeftNodeID":"0f1e"}`,
		`{}`, `null`, `{"publicip":"10.0.0.1"}`, `{"PublicIP":"10.0.0.1","PublicIP":"10.0.0.2"}`,
		`{"PublicIP":"10.0.0.1" }`, `{"BackendData":{"a":"\u00e9"}}`, `{"BackendData":{"a":1]}`,
		`{"BackendType":"vx\u006can"}`, "{\"BackendType\":\"\xff\"}", `{"BackendData":[1,2]}`,
		`{"PublicIP":null}`, `{"BackendData":{"a":1}}x`, `{"PublicIP":"1.2.3.4",}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast wireAttrs
		if !scanAttrs(data, &fast) {
			return
		}
		var slow wireAttrs
		if err := json.Unmarshal(data, &slow); err != nil {
			t.Fatalf("scanAttrs read %q; encoding/json refuses it: %v", data, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: scanAttrs read %+v, encoding/json %+v", data, fast, slow)
		}
	})
}

// TestScanAttrsReadsWhatNodesWrite: the lease values weftd writes (MarshalJSON) and those
// flanneld writes (its LeaseAttrs through json.Marshal: no PublicIPv6 unless it has one) are
// all read by scanAttrs, not left to encoding/json, and read right.
func TestScanAttrsReadsWhatNodesWrite(t *testing.T) {
	mac := json.RawMessage(`{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}`)
	written := []LeaseAttrs{
		{PublicIP: netip.MustParseAddr("192.168.64.3"), BackendType: BackendVXLAN, BackendData: mac, NodeID: "5c1e0a0b"},
		{PublicIP: netip.MustParseAddr("10.0.0.2"), PublicIPv6: netip.MustParseAddr("fd00::2"), BackendType: BackendHostGW},
		{PublicIPv6: netip.MustParseAddr("fd00::3"), BackendType: BackendVXLAN, BackendV6Data: mac},
		{PublicIP: netip.MustParseAddr("10.0.0.4"), BackendType: BackendWireGuard,
			BackendData: json.RawMessage(`{"PublicKey":"aGVsbG8gd29ybGQgaGVsbG8gd29ybGQgaGVsbG8gd28="}`)},
	}
	var values [][]byte
	for _, a := range written {
		b, err := a.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		values = append(values, b)
	}
	flanneld := []string{
		`{"PublicIP":"192.168.64.3","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}}`,
		`{"PublicIP":"10.0.0.2","PublicIPv6":"fd00::2","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"},"BackendV6Data":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:45"}}`,
		`{"PublicIP":"10.0.0.5","BackendType":"host-gw"}`,
	}
	for _, s := range flanneld {
		values = append(values, []byte(s))
	}
	for _, v := range values {
		var fast, slow wireAttrs
		if !scanAttrs(v, &fast) {
			t.Errorf("%s: left to encoding/json", v)
			continue
		}
		if err := json.Unmarshal(v, &slow); err != nil || !reflect.DeepEqual(fast, slow) {
			t.Errorf("%s: scanAttrs read %+v, encoding/json %+v (%v)", v, fast, slow, err)
		}
	}
	for i, a := range written {
		var back LeaseAttrs
		if err := back.UnmarshalJSON(values[i]); err != nil || !back.Equal(a) {
			t.Errorf("%s: read back as %+v (%v), want %+v", values[i], back, err, a)
		}
	}
}

// TestScanAttrsLeavesTheRest: what encoding/json reads differently from the plain shape
// (keys in another case, a key twice, whitespace, escapes, other UTF-8, other kinds of
// backend data) and what it refuses are left to it, and UnmarshalJSON reads them as it does.
func TestScanAttrsLeavesTheRest(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  LeaseAttrs
	}{
		{`{"publicip":"10.0.0.1","backendtype":"vxlan"}`, LeaseAttrs{PublicIP: netip.MustParseAddr("10.0.0.1"), BackendType: BackendVXLAN}},
		{`{"PublicIP":"10.0.0.1","PublicIP":"10.0.0.2"}`, LeaseAttrs{PublicIP: netip.MustParseAddr("10.0.0.2")}},
		{` {"PublicIP" : "10.0.0.1"} `, LeaseAttrs{PublicIP: netip.MustParseAddr("10.0.0.1")}},
		{`{"BackendType":"vx\u006can"}`, LeaseAttrs{BackendType: BackendVXLAN}},
		{`{"BackendType":"host-gw","BackendData":[1,2]}`, LeaseAttrs{BackendType: BackendHostGW, BackendData: json.RawMessage(`[1,2]`)}},
		{`{"BackendType":"x","Other":{"a":1}}`, LeaseAttrs{BackendType: "x"}},
	} {
		var w wireAttrs
		if scanAttrs([]byte(tc.value), &w) {
			t.Errorf("%s: read by scanAttrs, want it left to encoding/json", tc.value)
		}
		var got LeaseAttrs
		if err := got.UnmarshalJSON([]byte(tc.value)); err != nil || !got.Equal(tc.want) {
			t.Errorf("%s: read as %+v (%v), want %+v", tc.value, got, err, tc.want)
		}
	}
	for _, bad := range []string{`{"PublicIP":"10.0.0.1",}`, `{"BackendData":{"a":1]}`, `{"PublicIP":"10.0.0.1"}x`, `{"PublicIP":"10.0.0.1"`} {
		var w wireAttrs
		if scanAttrs([]byte(bad), &w) {
			t.Errorf("%s: read by scanAttrs", bad)
		}
		var got LeaseAttrs
		if err := got.UnmarshalJSON([]byte(bad)); err == nil {
			t.Errorf("%s: read as %+v, want an error", bad, got)
		}
	}
}

// BenchmarkLeaseAttrsUnmarshal is one lease value of the common shape, read.
func BenchmarkLeaseAttrsUnmarshal(b *testing.B) {
	v := []byte(`{"PublicIP":"198.18.3.27","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"02:57:46:00:03:1b"},"WeftNodeID":"a3f1c2d4e5f60718293a4b5c6d7e8f90"}`)
	b.ReportAllocs()
	for b.Loop() {
		var a LeaseAttrs
		if err := a.UnmarshalJSON(v); err != nil {
			b.Fatal(err)
		}
	}
}
