package kube

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// The node watch decodes each Node of its protobuf stream straight into the record the cache
// keeps (peerNode), reading only the fields weft reads. A cold start of 65,000 Nodes (make
// bench) spent most of its CPU on the stream: client-go's decoder made a whole corev1.Node of
// every event (its managed fields, its status: a kubelet's Node lists the images it holds)
// only for the cache to keep a hundred bytes of it, and collecting that garbage at the
// start-up's GOGC cost as much again. The Kubernetes types' protobuf wire format is read with
// protowire, the protobuf module's parser of it; anything else the watch carries (an error's
// Status, a Node in JSON from a server without protobuf) goes through the codec's decoder.

// nodeEvent is a Node of the watch as its decoder hands it to the reflector: the record the
// cache keeps, and what the reflector reads of the object besides, its resource version and
// whether a bookmark ends the initial events of a streamed list. The cache's Transformer
// takes the record out (nodeStore.toRecord).
type nodeEvent struct {
	// The metav1.Object methods not overridden read an empty ObjectMeta, as peerNode's do.
	*metav1.ObjectMeta
	rec        *peerNode
	rv         string
	initialEnd bool
}

// GetName is the Node's name.
func (e *nodeEvent) GetName() string { return e.rec.GetName() }

// GetNamespace is empty: Nodes are not namespaced.
func (e *nodeEvent) GetNamespace() string { return "" }

// GetResourceVersion is the Node's resource version, from which the reflector resumes.
func (e *nodeEvent) GetResourceVersion() string { return e.rv }

// GetAnnotations holds, of the Node's annotations, the one the reflector looks for on a
// bookmark: the end of a streamed list's initial events.
func (e *nodeEvent) GetAnnotations() map[string]string {
	if !e.initialEnd {
		return nil
	}
	return map[string]string{metav1.InitialEventsAnnotationKey: "true"}
}

// GetObjectKind is empty, as it is for the typed objects client-go decodes.
func (e *nodeEvent) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies the event; the record is never changed once made.
func (e *nodeEvent) DeepCopyObject() runtime.Object {
	c := *e
	return &c
}

// watchSerializer is the node watch's codecs: those of ns, whose decoders hand a Node to
// the reflector as a nodeEvent (nodeDecoder).
type watchSerializer struct {
	runtime.NegotiatedSerializer
	ann  annotations
	meta *metav1.ObjectMeta
}

// SupportedMediaTypes are ns's, the protobuf stream's decoder of watch events aliasing each
// event's object to the stream's buffer (eventSerializer).
func (s watchSerializer) SupportedMediaTypes() []runtime.SerializerInfo {
	infos := slices.Clone(s.NegotiatedSerializer.SupportedMediaTypes())
	for i, info := range infos {
		if info.MediaType == runtime.ContentTypeProtobuf && info.StreamSerializer != nil {
			stream := *info.StreamSerializer
			stream.Serializer = eventSerializer{stream.Serializer}
			infos[i].StreamSerializer = &stream
		}
	}
	return infos
}

// eventSerializer decodes a watch event of the protobuf stream with its object's bytes left
// in the stream's buffer, rather than copied out as a whole Node: the Node is decoded from
// them before the next event is read into it (client-go's rest/watch Decoder), and what is
// kept of it is copied then. Anything else goes to the stream's own serializer.
type eventSerializer struct{ runtime.Serializer }

// Decode decodes a metav1.WatchEvent into into.
func (s eventSerializer) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	ev, ok := into.(*metav1.WatchEvent)
	if !ok {
		return s.Serializer.Decode(data, defaults, into)
	}
	*ev = metav1.WatchEvent{}
	err := eachField(data, func(num protowire.Number, v []byte) error {
		switch num {
		case eventType:
			ev.Type = eventTypeOf(v)
		case eventObject:
			return eachField(v, func(num protowire.Number, v []byte) error {
				if num == rawExtensionRaw {
					ev.Object.Raw = v
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("kube: node watch: decoding a watch event of %d bytes: %w", len(data), err)
	}
	return ev, nil, nil
}

// eventTypeOf is the watch event type b names, without an allocation for those there are.
func eventTypeOf(b []byte) string {
	for _, t := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error} {
		if string(b) == string(t) {
			return string(t)
		}
	}
	return string(b)
}

// DecoderToVersion is ns's decoder, wrapped.
func (s watchSerializer) DecoderToVersion(d runtime.Decoder, gv runtime.GroupVersioner) runtime.Decoder {
	return &nodeDecoder{ann: s.ann, meta: s.meta, next: s.NegotiatedSerializer.DecoderToVersion(d, gv)}
}

// nodeDecoder decodes the objects of the node watch's events.
type nodeDecoder struct {
	ann  annotations
	meta *metav1.ObjectMeta
	next runtime.Decoder
	gvk  schema.GroupVersionKind
}

// Decode decodes a Node as a nodeEvent: from protobuf itself (readNode), from anything else
// with the codec's decoder; it decodes the rest with the codec's decoder. With into set,
// the caller wants its own type: the codec's decoder decodes into it.
func (d *nodeDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if into == nil {
		if raw, ok := protobufNode(data); ok {
			ev, err := d.readNode(raw)
			if err != nil {
				return nil, nil, fmt.Errorf("kube: node watch: decoding a Node of %d bytes: %w", len(raw), err)
			}
			d.gvk = corev1.SchemeGroupVersion.WithKind("Node")
			return ev, &d.gvk, nil
		}
	}
	obj, gvk, err := d.next.Decode(data, defaults, into)
	if n, ok := obj.(*corev1.Node); ok && err == nil && into == nil {
		return &nodeEvent{ObjectMeta: d.meta, rec: d.ann.record(n), rv: n.ResourceVersion,
			initialEnd: n.Annotations[metav1.InitialEventsAnnotationKey] == "true"}, gvk, nil
	}
	return obj, gvk, err
}

// protobufMagic starts every object the API server encodes as protobuf: a runtime.Unknown
// follows, which names the object's kind and holds its encoding.
const protobufMagic = "k8s\x00"

// The fields of the messages read, by number (k8s.io/apimachinery's and k8s.io/api's
// generated.proto).
const (
	eventType              = 1 // meta/v1 WatchEvent
	eventObject            = 2
	rawExtensionRaw        = 1 // runtime.RawExtension
	unknownTypeMeta        = 1 // runtime.Unknown
	unknownRaw             = 2
	unknownContentEncoding = 3
	typeMetaAPIVersion     = 1 // runtime.TypeMeta
	typeMetaKind           = 2
	nodeMetadata           = 1 // core/v1 Node
	nodeSpec               = 2
	metaName               = 1 // meta/v1 ObjectMeta
	metaResourceVersion    = 6
	metaCreationTimestamp  = 8
	metaAnnotations        = 12
	timeSeconds            = 1 // meta/v1 Time
	mapKey                 = 1 // a map's entry
	mapValue               = 2
	specPodCIDR            = 1 // core/v1 NodeSpec
	specPodCIDRs           = 7
)

// protobufNode returns the encoding of the Node that data holds, if it holds a v1 Node in
// protobuf.
func protobufNode(data []byte) ([]byte, bool) {
	b, ok := bytes.CutPrefix(data, []byte(protobufMagic))
	if !ok {
		return nil, false
	}
	var apiVersion, kind, raw []byte
	encoded := false
	err := eachField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case unknownTypeMeta:
			return eachField(v, func(num protowire.Number, v []byte) error {
				switch num {
				case typeMetaAPIVersion:
					apiVersion = v
				case typeMetaKind:
					kind = v
				}
				return nil
			})
		case unknownRaw:
			raw = v
		case unknownContentEncoding:
			encoded = len(v) > 0
		}
		return nil
	})
	if err != nil || encoded || string(apiVersion) != "v1" || string(kind) != "Node" {
		return nil, false
	}
	return raw, true
}

// readNode decodes a Node's protobuf encoding into its event, as the codec's decoder and
// nodeEvent's making of one from the corev1.Node would: later values of a field replace
// earlier ones, podCIDRs add up.
func (d *nodeDecoder) readNode(b []byte) (*nodeEvent, error) {
	var f recordFields[[]byte]
	var cidrs [2][]byte // where the podCIDRs go while the API server keeps to two
	f.cidrs = cidrs[:0]
	var podCIDR, rv []byte
	var created time.Time
	initialEnd := false
	watched := d.ann.watched()
	err := eachField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case nodeMetadata:
			return eachField(v, func(num protowire.Number, v []byte) error {
				switch num {
				case metaName:
					f.name = v
				case metaResourceVersion:
					rv = v
				case metaCreationTimestamp:
					// As meta/v1's Time decodes it: the seconds alone, in local time.
					var secs int64
					err := eachVarint(v, timeSeconds, func(x uint64) { secs = int64(x) })
					if err != nil {
						return fmt.Errorf("creationTimestamp: %w", err)
					}
					created = time.Time{}
					if len(v) > 0 {
						created = time.Unix(secs, 0)
					}
				case metaAnnotations:
					var key, val []byte
					err := eachField(v, func(num protowire.Number, v []byte) error {
						switch num {
						case mapKey:
							key = v
						case mapValue:
							val = v
						}
						return nil
					})
					if err != nil {
						return fmt.Errorf("annotations: %w", err)
					}
					for i, k := range watched {
						if string(key) == k {
							f.vals[i], f.has[i] = val, true
						}
					}
					if string(key) == metav1.InitialEventsAnnotationKey {
						initialEnd = string(val) == "true"
					}
				}
				return nil
			})
		case nodeSpec:
			return eachField(v, func(num protowire.Number, v []byte) error {
				switch num {
				case specPodCIDR:
					podCIDR = v
				case specPodCIDRs:
					f.cidrs = append(f.cidrs, v)
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(f.cidrs) == 0 && len(podCIDR) > 0 {
		f.cidrs = append(f.cidrs, podCIDR)
	}
	var age int64
	if !created.IsZero() {
		age = created.UnixNano()
	}
	return &nodeEvent{ObjectMeta: d.meta, rec: f.record(age), rv: string(rv), initialEnd: initialEnd}, nil
}

// eachField calls f with the number and the value of each length-delimited field of the
// message b (strings, bytes, messages: all readNode reads); it skips the others.
func eachField(b []byte, f func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, v); err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
	}
	return nil
}

// eachVarint calls f with each value of the varint field num of the message b.
func eachVarint(b []byte, num protowire.Number, f func(uint64)) error {
	for len(b) > 0 {
		n0, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if n0 == num && typ == protowire.VarintType {
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			f(x)
			b = b[n:]
			continue
		}
		if n = protowire.ConsumeFieldValue(n0, typ, b); n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
	}
	return nil
}
