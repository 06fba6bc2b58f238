package subnet

import (
	"encoding/json"
	"errors"
	"hash/maphash"
	"reflect"
	"slices"
	"testing"
)

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`,
		`{"Network":"10.0.0.0/8","SubnetLen":20,"SubnetMin":"10.0.0.0","SubnetMax":"10.1.0.0","Backend":{"Type":"host-gw"}}`,
		`{"EnableIPv6":true,"Network":"10.244.0.0/16","IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}`,
		`{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00::/120"}`,
		`{"Network":"10.0.0.0/28"}`, `{}`, `{"Backend":null}`, `nope`,
		`{"network":"10.0.0.0/16","NETWORK":"10.1.0.0/16","Netwrok":1,"backend":{"type":"Host-GW","VNI":"x","name":"cbr0"}}`,
		`{"Network":"10.0.0.0/16","ſubnetLen":26,"Backend":{"Type":"vxlan","vni":1,"VNI":2,"MacPrefix":"0e:2a","Learning":true,"K":0}}`,
		`{"Network":"10.0.0.0/16","Backend":{"Type":"wireguard","PSK":"x"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			var ce *ConfigError
			if errors.As(err, &ce) && ce.Key == "" {
				t.Errorf("ConfigError without a key: %v", err)
			}
			return
		}
		// An accepted config is coherent: every family's range is non-empty and inside its network.
		check := func(on bool, r Range, network string) {
			if !on {
				return
			}
			if r.Size() == 0 || !r.Contains(r.Nth(0)) || !r.Contains(r.Nth(r.Size()-1)) || r.Max.Less(r.Min) {
				t.Errorf("incoherent range %+v in %s from %q", r, network, data)
			}
		}
		// The keys weft ignores are those flanneld's encoding/json ignores.
		checkIgnored(t, data, new(rawConfig), func() any { return new(rawConfig) })
		var be struct{ Backend json.RawMessage }
		_ = json.Unmarshal(data, &be)
		switch c.Backend.Type {
		case BackendVXLAN:
			checkIgnored(t, be.Backend, new(rawVXLAN), func() any {
				return new(struct {
					Type *string
					rawVXLAN
				})
			}, "Type")
		case BackendHostGW:
			checkIgnored(t, be.Backend, new(rawHostGW), func() any {
				return new(struct {
					Type *string
					rawHostGW
				})
			}, "Type")
		default:
			t.Errorf("backend %q accepted from %q", c.Backend.Type, data)
		}
		check(c.EnableIPv4, c.IPv4Range(), c.Network.String())
		check(c.EnableIPv6, c.IPv6Range(), c.IPv6Network.String())
		if c.EnableIPv4 && (!c.Network.Contains(c.SubnetMin) || !c.Network.Contains(c.SubnetMax)) {
			t.Errorf("bounds outside the network: %+v", c)
		}
	})
}

// checkIgnored checks decode's matching of the keys of the JSON object obj into v (and the
// names known) against encoding/json's: a key decode ignores sets no field of a fresh
// newV(), v's type with known's fields, and a key it reads sets one (or fails to, the probe's
// value being of the wrong type).
func checkIgnored(t *testing.T, obj []byte, v any, newV func() any, known ...string) {
	t.Helper()
	ignored, err := decode(obj, v, "", known...)
	if err != nil {
		t.Fatalf("decode(%q) after ParseConfig took it: %v", obj, err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(obj, &keys); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		probe, err := json.Marshal(map[string]int{k: 0})
		if err != nil {
			t.Fatal(err)
		}
		v := newV()
		err = json.Unmarshal(probe, v)
		read, ign := err != nil || !reflect.ValueOf(v).Elem().IsZero(), slices.Contains(ignored, k)
		if read == ign {
			t.Errorf("key %q of %q: encoding/json reads it: %v, weft ignores it: %v", k, obj, read, ign)
		}
	}
}

func FuzzLeaseAttrs(f *testing.F) {
	for _, s := range []string{
		`{"PublicIP":"192.168.64.3","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}}`,
		`{"PublicIP":"10.0.0.2","PublicIPv6":"fd00::2","BackendType":"host-gw","BackendData":null}`,
		`{"PublicIP":"0.0.0.0"}`, `{}`, `null`, `{"BackendData":[1,2,{"a":null}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var a LeaseAttrs
		if err := json.Unmarshal(data, &a); err != nil {
			return
		}
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatalf("accepted %q but cannot write it back: %v", data, err)
		}
		var back LeaseAttrs
		if err := json.Unmarshal(b, &back); err != nil || !back.Equal(a) {
			t.Fatalf("round trip of %q: %s -> %+v, %v", data, b, back, err)
		}
	})
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"10.5.52.0-24", "10.12.13.0-24&fd00:12:13::-56", "0.0.0.0-0&fd00::-64", "1.2.3.4-32", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		sn, sn6, err := ParseKey(key)
		if err != nil {
			return
		}
		// Only the canonical form is accepted: writing the key back gives the same string.
		if got := Key(sn, sn6); got != key {
			t.Fatalf("ParseKey(%q) = %s, %s, which is written %q", key, sn, sn6, got)
		}
	})
}

// FuzzLeaseAttrsDigest: for any two lease values a node could read, the digests are equal
// exactly when the attributes are Equal; watchers rely on it to tell changes.
func FuzzLeaseAttrsDigest(f *testing.F) {
	for _, s := range [][2]string{
		{`{"PublicIP":"10.0.0.2","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}}`,
			`{"PublicIP":"10.0.0.2","BackendType":"vxlan","BackendData":{ "VNI": 1, "VtepMAC": "c6:d2:32:6f:8f:44" }}`},
		{`{"PublicIP":"10.0.0.2","BackendData":null}`, `{"PublicIP":"10.0.0.2"}`},
		{`{"BackendData":"a \" b"}`, `{"BackendData":"a \"b"}`},
		{`{"BackendData":[1, 2]}`, `{"BackendV6Data":[1,2]}`},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	seed := maphash.MakeSeed()
	f.Fuzz(func(t *testing.T, x, y []byte) {
		var a, b LeaseAttrs
		if a.UnmarshalJSON(x) != nil || b.UnmarshalJSON(y) != nil {
			return
		}
		if eq, same := a.Equal(b), a.Digest(seed) == b.Digest(seed); eq != same {
			t.Errorf("%q and %q: Equal %v, same digest %v", x, y, eq, same)
		}
	})
}
