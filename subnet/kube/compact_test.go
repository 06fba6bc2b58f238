package kube

import "testing"

// recordOf is the record of a node called n with every watched annotation set to v, made as
// a Node's strings make it and as its protobuf bytes do; the two must be the same.
func recordOf(t *testing.T, v string) *peerNode {
	t.Helper()
	s := recordFields[string]{name: "n", cidrs: []string{"10.0.0.0/24"}}
	b := recordFields[[]byte]{name: []byte("n"), cidrs: [][]byte{[]byte("10.0.0.0/24")}}
	for i := range numWatched {
		s.vals[i], s.has[i] = v, true
		b.vals[i], b.has[i] = []byte(v), true
	}
	p, q := s.record(1), b.record(1)
	if !p.equal(q) {
		t.Fatalf("value %q: the record of the strings %q differs from that of the bytes %q", v, p.data, q.data)
	}
	return p
}

// TestCompactForms: the values nodes write are kept in their compact forms and given back as
// they were; values that differ from those forms by a byte are kept as they are.
func TestCompactForms(t *testing.T) {
	a := storeAnnotations(t)
	empty := recordOf(t, "")
	for _, c := range []struct {
		v       string
		compact bool
	}{
		{"192.0.2.1", true},
		{"0.0.0.0", true},
		{"255.255.255.255", true},
		{`{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}`, true},
		{`{"VNI":0,"VtepMAC":"00:00:00:00:00:00"}`, true},
		{`{"VNI":4294967295,"VtepMAC":"ff:ff:ff:ff:ff:ff"}`, true},
		{"", false},
		{"1.2.3", false},
		{"1.2.3.4.", false},
		{"01.2.3.4", false},
		{"1.2.3.256", false},
		{"1.2.3.4 ", false},
		{"1.2.3.1234", false},
		{"2001:db8::1", false},
		{"::ffff:1.2.3.4", false},
		{`{"VNI":01,"VtepMAC":"c6:d2:32:6f:8f:44"}`, false},
		{`{"VNI":4294967296,"VtepMAC":"c6:d2:32:6f:8f:44"}`, false},
		{`{"VNI":-1,"VtepMAC":"c6:d2:32:6f:8f:44"}`, false},
		{`{"VNI":,"VtepMAC":"c6:d2:32:6f:8f:44"}`, false},
		{`{"VNI":1,"VtepMAC":"C6:D2:32:6F:8F:44"}`, false},
		{`{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:4"}`, false},
		{`{"VNI":1,"VtepMAC":"c6-d2-32-6f-8f-44"}`, false},
		{`{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"} `, false},
		{`{"VNI": 1,"VtepMAC":"c6:d2:32:6f:8f:44"}`, false},
		{`{"VtepMAC":"c6:d2:32:6f:8f:44","VNI":1}`, false},
	} {
		p := recordOf(t, c.v)
		get := p.lookup(a)
		for _, k := range a.watched() {
			if got, ok := get(k); got != c.v || !ok {
				t.Errorf("%q kept, %s gives back %q, %v", c.v, k, got, ok)
			}
		}
		// Each value takes its length after its header, unless it is kept compact.
		if kept := (len(p.data) - len(empty.data)) / numWatched; (kept != len(c.v)) != c.compact {
			t.Errorf("%q: kept in %d bytes, compact: want %v", c.v, kept, c.compact)
		}
	}
}

// FuzzRecordValues: whatever a watched annotation holds, the record gives it back byte for
// byte (up to the cut at maxValue), made from strings or from bytes alike.
func FuzzRecordValues(f *testing.F) {
	f.Add("192.0.2.1")
	f.Add(`{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}`)
	f.Add(`{"VNI":4294967295,"VtepMAC":"ff:ff:ff:ff:ff:ff"}`)
	f.Add("1.2.3.04")
	a := storeAnnotations(f)
	f.Fuzz(func(t *testing.T, v string) {
		get := recordOf(t, v).lookup(a)
		want := v[:min(len(v), maxValue)]
		for _, k := range a.watched() {
			if got, ok := get(k); got != want || !ok {
				t.Fatalf("%q kept, %s gives back %q, %v", v, k, got, ok)
			}
		}
	})
}
