package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/framer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// streamedList is what streamNodes measured: how long the API server took to send every
// Node, and how many it sent.
type streamedList struct {
	took  time.Duration
	nodes int
}

// maxFrame bounds one watch event's frame; a Node of the bench is about half a kilobyte.
const maxFrame = 1 << 20

// streamNodes asks the API server for every Node as client-go's reflector asks for them at
// start-up (a watch whose initial events are the list, WatchList, in protobuf) and reads the
// stream until the bookmark that ends the initial events, decoding of each event its type
// and nothing of its Node. The time is what any Kubernetes-mode daemon waits for before it
// holds every lease: the datastore's part of the floor, as kernelFloor is the kernel's.
func streamNodes(ctx context.Context, admin *rest.Config) (streamedList, error) {
	cfg := rest.CopyConfig(admin)
	cfg.APIPath, cfg.GroupVersion = "/api", &corev1.SchemeGroupVersion
	cfg.ContentType, cfg.AcceptContentTypes = runtime.ContentTypeProtobuf, runtime.ContentTypeProtobuf
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	client, err := rest.RESTClientFor(cfg)
	if err != nil {
		return streamedList{}, fmt.Errorf("client of the API server: %w", err)
	}
	yes := true
	opts := metav1.ListOptions{Watch: true, SendInitialEvents: &yes, AllowWatchBookmarks: true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}
	start := time.Now()
	body, err := client.Get().Resource("nodes").VersionedParams(&opts, scheme.ParameterCodec).Stream(ctx)
	if err != nil {
		return streamedList{}, fmt.Errorf("watching Nodes with their initial events: %w", err)
	}
	defer body.Close()
	frames := framer.NewLengthDelimitedFrameReader(body)
	buf := make([]byte, maxFrame)
	var got streamedList
	for {
		n, err := frames.Read(buf)
		switch {
		case errors.Is(err, io.ErrShortBuffer):
			return got, fmt.Errorf("a watch event over %d bytes after %d Nodes", maxFrame, got.nodes)
		case errors.Is(err, io.EOF):
			return got, fmt.Errorf("the stream ended after %d Nodes, before the initial events did", got.nodes)
		case err != nil:
			return got, fmt.Errorf("reading the stream after %d Nodes: %w", got.nodes, err)
		}
		var ev metav1.WatchEvent
		if err := ev.Unmarshal(buf[:n]); err != nil {
			return got, fmt.Errorf("watch event %d: %w", got.nodes+1, err)
		}
		switch watch.EventType(ev.Type) {
		case watch.Added:
			got.nodes++
		case watch.Bookmark:
			end, err := initialEventsEnd(ev.Object.Raw)
			if err != nil {
				return got, err
			}
			if end {
				got.took = time.Since(start)
				return got, nil
			}
		case watch.Error:
			return got, fmt.Errorf("the API server ended the stream with an error after %d Nodes", got.nodes)
		default:
			return got, fmt.Errorf("a %s event among the initial events", ev.Type)
		}
	}
}

// initialEventsEnd reports whether a bookmark's object marks the end of the initial events.
func initialEventsEnd(raw []byte) (bool, error) {
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil)
	if err != nil {
		return false, fmt.Errorf("decoding a bookmark: %w", err)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return false, fmt.Errorf("a bookmark's metadata: %w", err)
	}
	return m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true", nil
}
