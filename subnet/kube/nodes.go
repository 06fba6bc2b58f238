package kube

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// nodes is a client of the Node objects of the core/v1 API, all that weft asks the API
// server about, and of the Events it posts about its own. It decodes with a scheme that
// knows core/v1 alone: client-go's generated clients, the typed core/v1 one included, link
// client-go's scheme, which registers every API group of Kubernetes at start-up and costs
// weftd megabytes before it does anything. (The same goes for client-go's event recorders,
// which is why weft posts its Events itself: events.Recorder, kube.Manager.PostEvent.)
type nodes struct {
	rc     *rest.RESTClient
	watch  *rest.RESTClient // rc, whose watches decode Nodes into records (nodeDecoder)
	params runtime.ParameterCodec
}

// newNodes returns a client of Nodes on the API server of c, whose content types it keeps;
// its watches read the annotations of ann.
func newNodes(c *rest.Config, ann annotations) (*nodes, error) {
	sch := runtime.NewScheme()
	// Registers the core/v1 kinds and, for its group version, the option and status kinds of
	// meta/v1 that requests and error responses carry.
	if err := corev1.AddToScheme(sch); err != nil {
		return nil, fmt.Errorf("kube: core/v1 scheme: %w", err)
	}
	c = rest.CopyConfig(c)
	gv := corev1.SchemeGroupVersion
	c.GroupVersion = &gv
	c.APIPath = "/api"
	codecs := serializer.NewCodecFactory(sch).WithoutConversion()
	c.NegotiatedSerializer = codecs
	// Lists and watches come as protobuf, which decodes several times faster than JSON (5,000
	// Nodes: the list was most of a cold start); patches stay JSON, their own content type.
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kube: client for %s: %w", c.Host, err)
	}
	// The watch's client shares rc's connections (its HTTP client).
	c.NegotiatedSerializer = watchSerializer{NegotiatedSerializer: codecs, ann: ann, meta: &metav1.ObjectMeta{}}
	wc, err := rest.RESTClientForConfigAndClient(c, rc.Client)
	if err != nil {
		return nil, fmt.Errorf("kube: watch client for %s: %w", c.Host, err)
	}
	return &nodes{rc: rc, watch: wc, params: runtime.NewParameterCodec(sch)}, nil
}

// Get returns the Node called name.
func (c *nodes) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error) {
	n := &corev1.Node{}
	err := c.rc.Get().Resource("nodes").Name(name).VersionedParams(&opts, c.params).Timeout(requestTimeout).Do(ctx).Into(n)
	return n, err
}

// List returns the Nodes that opts select.
func (c *nodes) List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	l := &corev1.NodeList{}
	err := c.rc.Get().Resource("nodes").VersionedParams(&opts, c.params).Timeout(timeout(opts)).Do(ctx).Into(l)
	return l, err
}

// Watch watches the Nodes that opts select.
func (c *nodes) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.watch.Get().Resource("nodes").VersionedParams(&opts, c.params).Timeout(timeout(opts)).Watch(ctx)
}

// Patch applies a patch of type pt to the Node called name, or to its subresource.
func (c *nodes) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresource ...string) (*corev1.Node, error) {
	n := &corev1.Node{}
	err := c.rc.Patch(pt).Resource("nodes").Name(name).SubResource(subresource...).
		VersionedParams(&opts, c.params).Body(data).Timeout(requestTimeout).Do(ctx).Into(n)
	return n, err
}

// CreateEvent creates ev, an Event about a Node, in its namespace.
func (c *nodes) CreateEvent(ctx context.Context, ev *corev1.Event) error {
	return c.rc.Post().Namespace(ev.Namespace).Resource("events").Body(ev).Timeout(requestTimeout).Do(ctx).Error()
}

// requestTimeout bounds a request about one object (a get, a patch, an Event), and is the
// server's timeout of it too: one to an API server that hangs fails then and is retried,
// rather than holding its caller for the caller's whole deadline.
const requestTimeout = 10 * time.Second

// timeout is the client-side timeout of a list or watch: the one the server is asked for.
func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
