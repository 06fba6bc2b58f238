package kube

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/weftnet/weft/subnet"
)

// wireCodecs are the codecs of core/v1, as the API server's and client-go's.
func wireCodecs(t *testing.T) serializer.CodecFactory {
	t.Helper()
	sch := runtime.NewScheme()
	if err := corev1.AddToScheme(sch); err != nil {
		t.Fatal(err)
	}
	return serializer.NewCodecFactory(sch)
}

// encode is obj as the API server writes it in the content type ct.
func encode(t *testing.T, cf serializer.CodecFactory, ct string, obj runtime.Object) []byte {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(cf.SupportedMediaTypes(), ct)
	if !ok {
		t.Fatalf("no serializer for %s", ct)
	}
	var b bytes.Buffer
	if err := cf.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion).Encode(obj, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestReadNode: a Node in protobuf, encoded by Kubernetes' own encoder, decodes into the
// record, resource version and bookmark mark that decoding it into a corev1.Node gives, in
// every shape weft reads (absent and empty annotations, an oversized value, podCIDR alone,
// two podCIDRs, no creation time); a Node in JSON does too, through the codec's decoder; an
// error's Status stays a Status; a cut encoding is an error.
func TestReadNode(t *testing.T) {
	a := storeAnnotations(t)
	cf := wireCodecs(t)
	ws := watchSerializer{NegotiatedSerializer: cf.WithoutConversion(), ann: a, meta: &metav1.ObjectMeta{}}
	decoder := func(ct string) runtime.Decoder {
		t.Helper()
		info, ok := runtime.SerializerInfoForMediaType(cf.SupportedMediaTypes(), ct)
		if !ok {
			t.Fatalf("no serializer for %s", ct)
		}
		return ws.DecoderToVersion(info.Serializer, corev1.SchemeGroupVersion)
	}

	full := storeNode(a, "full", "10.0.1.0/24", "192.0.2.1")
	full.Annotations[a.backendData] = ""
	full.Annotations[a.backendV6Data] = strings.Repeat("x", 3*subnet.MaxAttrsSize)
	full.Annotations[a.publicIPv6] = "2001:db8::1"
	full.Annotations[a.backendType] = "vxlan"
	legacy := storeNode(a, "legacy", "10.0.2.0/24", "192.0.2.2")
	legacy.Spec.PodCIDRs = nil
	dual := storeNode(a, "dual", "10.0.3.0/24", "192.0.2.3")
	dual.Spec.PodCIDRs = append(dual.Spec.PodCIDRs, "fd00:3::/64")
	bare := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bare", ResourceVersion: "12"}}
	epoch := storeNode(a, "epoch", "10.0.4.0/24", "192.0.2.4")
	epoch.CreationTimestamp = metav1.NewTime(time.Unix(0, 0))
	bookmark := &corev1.Node{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "99",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}

	for _, ct := range []string{runtime.ContentTypeProtobuf, runtime.ContentTypeJSON} {
		d := decoder(ct)
		for _, n := range []*corev1.Node{full, legacy, dual, bare, epoch, bookmark} {
			data := encode(t, cf, ct, n)
			if _, ok := protobufNode(data); ok != (ct == runtime.ContentTypeProtobuf) {
				t.Errorf("%s %q: read by readNode %v", ct, n.Name, ok)
			}
			obj, _, err := d.Decode(data, nil, nil)
			if err != nil {
				t.Fatalf("%s %q: %v", ct, n.Name, err)
			}
			ev, ok := obj.(*nodeEvent)
			if !ok {
				t.Fatalf("%s %q: decoded as a %T", ct, n.Name, obj)
			}
			// What the codec's decoder makes of the same bytes, as the list's path reads it.
			var back corev1.Node
			if _, _, err := cf.UniversalDeserializer().Decode(data, nil, &back); err != nil {
				t.Fatal(err)
			}
			want := a.record(&back)
			if !ev.rec.equal(want) || ev.rv != n.ResourceVersion || ev.GetName() != n.Name {
				t.Errorf("%s %q: record %q (age %d, rv %q), want %q (age %d, rv %q)", ct, n.Name,
					ev.rec.data, ev.rec.created, ev.rv, want.data, want.created, n.ResourceVersion)
			}
			if end := ev.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"; end != (n == bookmark) {
				t.Errorf("%s %q: end of the initial events %v", ct, n.Name, end)
			}
		}
	}
	if p := decodeRecord(t, decoder(runtime.ContentTypeProtobuf), encode(t, cf, runtime.ContentTypeProtobuf, full)); p.created == 0 ||
		len(p.cidrs()) != 1 || len(p.data) > 2*subnet.MaxAttrsSize {
		t.Errorf("full node's record: age %d, podCIDRs %v, %d bytes", p.created, p.cidrs(), len(p.data))
	}
	if p := decodeRecord(t, decoder(runtime.ContentTypeProtobuf), encode(t, cf, runtime.ContentTypeProtobuf, dual)); len(p.cidrs()) != 2 {
		t.Errorf("dual-stack node's podCIDRs %v", p.cidrs())
	}

	d := decoder(runtime.ContentTypeProtobuf)
	st := &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old"}
	obj, _, err := d.Decode(encode(t, cf, runtime.ContentTypeProtobuf, st), nil, nil)
	if got, ok := obj.(*metav1.Status); err != nil || !ok || got.Code != 410 {
		t.Errorf("a Status decodes as %#v, %v", obj, err)
	}
	data := encode(t, cf, runtime.ContentTypeProtobuf, full)
	raw, _ := protobufNode(data)
	if _, err := d.(*nodeDecoder).readNode(raw[:len(raw)-3]); err == nil {
		t.Error("a Node cut short decodes")
	}
	var into corev1.Node
	if obj, _, err := d.Decode(data, nil, &into); err != nil || obj != &into || into.Name != "full" {
		t.Errorf("decoding into a Node: %T, %v", obj, err)
	}
}

// TestEventSerializer: a watch event of the protobuf stream, encoded by Kubernetes' own
// stream serializer, decodes as that serializer decodes it.
func TestEventSerializer(t *testing.T) {
	a := storeAnnotations(t)
	cf := wireCodecs(t)
	ws := watchSerializer{NegotiatedSerializer: cf.WithoutConversion(), ann: a, meta: &metav1.ObjectMeta{}}
	info, ok := runtime.SerializerInfoForMediaType(ws.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok || info.StreamSerializer == nil {
		t.Fatal("no protobuf stream serializer")
	}
	ours := info.StreamSerializer.Serializer
	if _, ok := ours.(eventSerializer); !ok {
		t.Fatalf("the protobuf stream's serializer is a %T", ours)
	}
	theirs := ours.(eventSerializer).Serializer
	node := encode(t, cf, runtime.ContentTypeProtobuf, storeNode(a, "n1", "10.0.1.0/24", "192.0.2.1"))
	for _, typ := range []string{"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", "ODD"} {
		var b bytes.Buffer
		if err := theirs.Encode(&metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: node}}, &b); err != nil {
			t.Fatal(err)
		}
		var got, want metav1.WatchEvent
		if _, _, err := ours.Decode(b.Bytes(), nil, &got); err != nil {
			t.Fatal(err)
		}
		if _, _, err := theirs.Decode(b.Bytes(), nil, &want); err != nil {
			t.Fatal(err)
		}
		if got.Type != want.Type || !bytes.Equal(got.Object.Raw, want.Object.Raw) || got.Object.Object != nil {
			t.Errorf("%s: decoded %q with %d bytes, want %q with %d", typ, got.Type, len(got.Object.Raw), want.Type, len(want.Object.Raw))
		}
	}
}

func decodeRecord(t *testing.T, d runtime.Decoder, data []byte) *peerNode {
	t.Helper()
	obj, _, err := d.Decode(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*nodeEvent).rec
}

// FuzzReadNode: whatever bytes both Kubernetes' own decoder and readNode take as a Node,
// readNode reads into the record, resource version and name that the decoded Node gives;
// and it never panics. Each may refuse what the other takes: readNode reads fewer fields,
// and refuses group markers that do not match (protowire's rule), which Kubernetes' decoder
// skips and no Kubernetes encoder writes (testdata/fuzz/FuzzReadNode).
func FuzzReadNode(f *testing.F) {
	a, err := newAnnotations(DefaultAnnotationPrefix)
	if err != nil {
		f.Fatal(err)
	}
	dual := storeNode(a, "dual", "10.0.3.0/24", "192.0.2.3")
	dual.Spec.PodCIDRs = append(dual.Spec.PodCIDRs, "fd00:3::/64")
	legacy := storeNode(a, "legacy", "10.0.2.0/24", "192.0.2.2")
	legacy.Spec.PodCIDRs = nil
	for _, n := range []*corev1.Node{storeNode(a, "full", "10.0.1.0/24", "192.0.2.1"), dual, legacy,
		{ObjectMeta: metav1.ObjectMeta{Name: "bare", ResourceVersion: "12"}}} {
		b, err := n.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	d := &nodeDecoder{ann: a, meta: &metav1.ObjectMeta{}}
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := d.readNode(b)
		var n corev1.Node
		if err != nil || n.Unmarshal(b) != nil {
			return
		}
		if want := a.record(&n); !ev.rec.equal(want) || ev.rv != n.ResourceVersion || ev.GetName() != n.Name {
			t.Fatalf("%x: record %q (age %d, rv %q), want %q (age %d, rv %q)", b,
				ev.rec.data, ev.rec.created, ev.rv, want.data, want.created, n.ResourceVersion)
		}
	})
}
