package kube

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// client lists and watches the three kinds policy reads: pods and namespaces (core/v1) and
// NetworkPolicies (networking.k8s.io/v1). It decodes with a scheme of those two group
// versions alone: client-go's generated clientset links client-go's scheme, which registers
// every API group of Kubernetes at start-up and costs weftd megabytes of memory whether
// policy is on or not (as subnet/kube's Node client says).
type client struct {
	core       *rest.RESTClient
	networking *rest.RESTClient
	params     runtime.ParameterCodec
}

// newClient returns a client of the API server of c, whose credentials and content types it
// keeps.
func newClient(c *rest.Config) (*client, error) {
	sch := runtime.NewScheme()
	// Each registers its group version's kinds and, for it, the option and status kinds of
	// meta/v1 that requests and error responses carry.
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(sch); err != nil {
			return nil, fmt.Errorf("netpol watch: scheme: %w", err)
		}
	}
	codecs := serializer.NewCodecFactory(sch).WithoutConversion()
	core, err := restClient(c, corev1.SchemeGroupVersion, "/api", codecs, nil)
	if err != nil {
		return nil, err
	}
	networking, err := restClient(c, networkingv1.SchemeGroupVersion, "/apis", codecs, core)
	if err != nil {
		return nil, err
	}
	return &client{core: core, networking: networking, params: runtime.NewParameterCodec(sch)}, nil
}

// restClient is a client of group version gv under path on c's server, sharing share's
// connections when share is not nil.
func restClient(c *rest.Config, gv schema.GroupVersion, path string, codecs runtime.NegotiatedSerializer, share *rest.RESTClient) (*rest.RESTClient, error) {
	c = rest.CopyConfig(c)
	c.GroupVersion, c.APIPath, c.NegotiatedSerializer = &gv, path, codecs
	var rc *rest.RESTClient
	var err error
	if share != nil {
		rc, err = rest.RESTClientForConfigAndClient(c, share.Client)
	} else {
		rc, err = rest.RESTClientFor(c)
	}
	if err != nil {
		return nil, fmt.Errorf("netpol watch: client of %s at %s: %w", gv, c.Host, err)
	}
	return rc, nil
}

// listWatch is the list and watch of resource, across all namespaces, through rc; newList
// makes the list object a list decodes into.
func (c *client) listWatch(rc *rest.RESTClient, resource string, newList func() runtime.Object) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			l := newList()
			err := rc.Get().Resource(resource).VersionedParams(&opts, c.params).Timeout(timeout(opts)).Do(ctx).Into(l)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			return rc.Get().Resource(resource).VersionedParams(&opts, c.params).Timeout(timeout(opts)).Watch(ctx)
		},
	}
}

func (c *client) pods() *cache.ListWatch {
	return c.listWatch(c.core, "pods", func() runtime.Object { return &corev1.PodList{} })
}

func (c *client) namespaces() *cache.ListWatch {
	return c.listWatch(c.core, "namespaces", func() runtime.Object { return &corev1.NamespaceList{} })
}

func (c *client) policies() *cache.ListWatch {
	return c.listWatch(c.networking, "networkpolicies", func() runtime.Object { return &networkingv1.NetworkPolicyList{} })
}

// timeout is the client-side timeout of a list or watch: the one the server is asked for.
func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
