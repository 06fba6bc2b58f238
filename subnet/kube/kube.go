// Package kube is the subnet.Manager on the Kubernetes API, in flannel's layout: a node's
// subnet is its spec.podCIDR(s), handed out by kube-controller-manager (--allocate-node-cidrs);
// what the node publishes with it (backend type and data, public IPs) lives in annotations
// of its Node object; the network config is a file, net-conf.json from the kube-flannel-cfg
// ConfigMap. Peers are the nodes that carry the kube-subnet-manager annotation and a podCIDR.
//
// The watch is built for large clusters: one client-go reflector whose cache keeps a small
// record of what weft reads of each Node (store.go), the first list streamed and protobuf on
// the wire, and changes gathered into batches, so that a burst of node updates is one
// convergence and updates of fields weft does not read cost nothing downstream.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/transport"

	"github.com/weftnet/weft/subnet"
)

// Defaults of flanneld.
const (
	DefaultAnnotationPrefix = "flannel.alpha.coreos.com"
	DefaultNetConfPath      = "/etc/kube-flannel/net-conf.json"
)

// fieldManager names weft in the managedFields of the Node objects it patches.
const fieldManager = "weftd"

// Config is how to reach the API server and which node this is. Kubeconfig and APIURL are
// flanneld's --kubeconfig-file and --kube-api-url; with neither, the in-cluster service
// account is used.
type Config struct {
	Kubeconfig string
	APIURL     string
	// REST, when set, is used instead of Kubeconfig, APIURL or the in-cluster config
	// (tests, programs that already hold a client config).
	REST *rest.Config

	AnnotationPrefix string // --kube-annotation-prefix, default DefaultAnnotationPrefix
	NetConfPath      string // --net-config-path, default DefaultNetConfPath
	NodeName         string // NODE_NAME: the Node object of this node

	Logger *slog.Logger
	// OnSkip is called for every peer node whose annotations or podCIDRs cannot be used, once
	// per distinct problem, after it has been logged. Metrics hook in here.
	OnSkip func(node string, err error)
	// OnWatchRestart is called when the node watch broke and is about to resume; OnRelist
	// when the reflector lists every node again (after a gap it could not bridge).
	OnWatchRestart func(err error)
	OnRelist       func()
}

// Manager is a subnet.Manager on the Kubernetes API.
type Manager struct {
	nodes   *nodes
	rest    *rest.Config // the client config nodes was made from
	node    string
	ann     annotations
	netConf string
	log     *slog.Logger

	onSkip         func(node string, err error)
	onWatchRestart func(err error)
	onRelist       func()

	mu sync.Mutex
	// public holds the addresses the daemon asked for at the last Acquire, before any
	// public-ip-overwrite: Renew publishes from them, so that removing the overwrite
	// annotation brings the node's own addresses back.
	public [2]netip.Addr
	// watchErr is why the last attempt to watch nodes failed; nil once one succeeded.
	watchErr error
	// uid is the UID of the node's Node object as last read, for the Events about it.
	uid types.UID
}

var (
	_ subnet.Manager = (*Manager)(nil)
	_ subnet.Checker = (*Manager)(nil)
	_ subnet.Prober  = (*Manager)(nil)
	_ subnet.Readier = (*Manager)(nil)
)

// New returns a Manager for the node c.NodeName. It does not talk to the API server yet.
func New(c Config) (*Manager, error) {
	if c.NodeName == "" {
		return nil, errors.New("kube: no node name: set NODE_NAME to the name of this node's Node object")
	}
	return open(c)
}

// open is New for c's node, or for no node at all (List).
func open(c Config) (*Manager, error) {
	prefix := c.AnnotationPrefix
	if prefix == "" {
		prefix = DefaultAnnotationPrefix
	}
	ann, err := newAnnotations(prefix)
	if err != nil {
		return nil, err
	}
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rc := c.REST
	if rc == nil {
		if rc, err = restConfig(c.Kubeconfig, c.APIURL); err != nil {
			return nil, err
		}
	}
	rc = rest.CopyConfig(rc)
	tokenFromFile(rc)
	// Protobuf is several times cheaper than JSON to decode, which matters for a list of
	// thousands of nodes; JSON stays acceptable for servers or proxies that lack it.
	rc.ContentType = runtime.ContentTypeProtobuf
	rc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	if rc.UserAgent == "" {
		rc.UserAgent = "weftd"
	}
	rc.WarningHandlerWithContext = warningLogger{log}
	nodes, err := newNodes(rc, ann)
	if err != nil {
		return nil, err
	}
	netConf := c.NetConfPath
	if netConf == "" {
		netConf = DefaultNetConfPath
	}
	return &Manager{nodes: nodes, rest: rc, node: c.NodeName, ann: ann, netConf: netConf, log: log,
		onSkip: c.OnSkip, onWatchRestart: c.OnWatchRestart, onRelist: c.OnRelist}, nil
}

// REST is a copy of the client config the Manager talks to the API server with (its
// credentials, protobuf first, weftd's user agent), for the other watches of weftd.
func (m *Manager) REST() *rest.Config { return rest.CopyConfig(m.rest) }

// Check implements subnet.Checker from the reflector's last attempt to watch nodes: it costs
// no request. Before Watch runs there is nothing to tell, and Check reports no error.
func (m *Manager) Check() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.watchErr != nil {
		return fmt.Errorf("kube: watching nodes: %w", m.watchErr)
	}
	return nil
}

// Probe implements subnet.Prober with the smallest request an API server answers: GET
// /version, served from its memory without a read of etcd, and open to every client (the
// system:public-info-viewer role), so that the weft role needs nothing more. A frozen server,
// or a path that drops every packet, keeps the watch's connection open and silent, which
// Check cannot tell from a quiet cluster; the probe gets no answer by ctx's deadline.
func (m *Manager) Probe(ctx context.Context) error {
	if err := m.nodes.rc.Get().AbsPath("/version").Do(ctx).Error(); err != nil {
		return fmt.Errorf("kube: no answer from the API server: %w", err)
	}
	return nil
}

func (m *Manager) reachable(err error) {
	m.mu.Lock()
	m.watchErr = err
	m.mu.Unlock()
}

// restConfig builds the client config as flanneld does, but without client-go's fallback to
// a default kubeconfig when the in-cluster config is missing: outside a pod, weft wants to be
// told where the API server is.
func restConfig(kubeconfig, apiURL string) (*rest.Config, error) {
	if kubeconfig == "" && apiURL == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kube: no --kubeconfig-file or --kube-api-url, and not in a pod: %w", err)
		}
		return rc, nil
	}
	rc, err := clientcmd.BuildConfigFromFlags(apiURL, kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kube: client config (kubeconfig %q, API URL %q): %w", kubeconfig, apiURL, err)
	}
	return rc, nil
}

// tokenFromFile makes a client whose token comes from a file (the pod's projected
// service-account token in-cluster, a kubeconfig's tokenFile) read the file again as soon as
// the API server refuses the token it holds. client-go alone reads it again only once a
// minute: the kubelet writes a new token well before the old one expires, but a token
// revoked when its successor is written (its bound object deleted) would fail every request,
// the node watch included, for up to that minute. client-go's cached file token source,
// behind its resettable wrapper, forgets its token on a 401 and reads the file at the next
// request; it is used instead of the token read at start.
func tokenFromFile(rc *rest.Config) {
	if rc.BearerTokenFile == "" {
		return
	}
	src := transport.NewCachedFileTokenSource(rc.BearerTokenFile)
	// Without them the bearer-token wrapper stays out of the way: it would set the header
	// first, and the token source's wrapper leaves a request that has one alone.
	rc.BearerToken, rc.BearerTokenFile = "", ""
	rc.Wrap(transport.ResettableTokenSourceWrapTransport(src))
}

// warningLogger sends the API server's warnings (deprecations and the like) to weft's log
// instead of client-go's global one.
type warningLogger struct{ log *slog.Logger }

func (w warningLogger) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.log.Warn("warning from the API server", "warning", text)
}
