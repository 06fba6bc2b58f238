package perf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/kube"
)

// kubeWorkers is how many Node objects are created at once.
const kubeWorkers = 16

// kubePeers creates fake peers as Node objects: a podCIDR and flannel's annotations, as a
// node running flannel has them.
type kubePeers struct {
	cs      kubernetes.Interface
	cfg     *subnet.Config
	touches int // calls of touch so far
}

func newKubePeers(cs kubernetes.Interface) (*kubePeers, error) {
	cfg, err := subnet.ParseConfig([]byte(NetConf))
	if err != nil {
		return nil, fmt.Errorf("parsing the network config: %w", err)
	}
	return &kubePeers{cs: cs, cfg: cfg}, nil
}

// peerNodeName names peer i's Node.
func peerNodeName(i int) string { return fmt.Sprintf("peer%05d", i) }

// create makes the Node objects of peers from..to (inclusive).
func (k *kubePeers) create(ctx context.Context, from, to int) error {
	return each(ctx, from, to, k.createOne)
}

// touch changes a label on the Nodes of peers from..to, one patch each: what kubelets and
// controllers do to Nodes all day (labels, taints, conditions), touching none of flannel's
// annotations, so that no lease changes. Every call writes a label value of its own, so that
// every patch is a change the watch delivers.
func (k *kubePeers) touch(ctx context.Context, from, to int) error {
	k.touches++
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{"weft-bench/touched":"%d"}}}`, k.touches)
	return each(ctx, from, to, func(ctx context.Context, i int) error {
		name := peerNodeName(i)
		if _, err := k.cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("patching Node %s: %w", name, err)
		}
		return nil
	})
}

// each runs f for every i from..to (inclusive), kubeWorkers at a time, until the first error.
func each(ctx context.Context, from, to int, f func(ctx context.Context, i int) error) error {
	idx := make(chan int)
	errc := make(chan error, kubeWorkers)
	var wg sync.WaitGroup
	for range kubeWorkers {
		wg.Go(func() {
			for i := range idx {
				if err := f(ctx, i); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	var err error
feed:
	for i := from; i <= to; i++ {
		select {
		case idx <- i:
		case err = <-errc:
			break feed
		case <-ctx.Done():
			err = ctx.Err()
			break feed
		}
	}
	close(idx)
	wg.Wait()
	close(errc)
	errs := []error{err}
	for e := range errc {
		errs = append(errs, e)
	}
	return errors.Join(errs...)
}

func (k *kubePeers) createOne(ctx context.Context, i int) error {
	sn, attrs := peer(i)
	ann, err := kube.Annotations("", k.cfg, attrs)
	if err != nil {
		return fmt.Errorf("annotations of peer %d: %w", i, err)
	}
	name := peerNodeName(i)
	if _, err := k.cs.CoreV1().Nodes().Create(ctx, node(name, sn, ann), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Node %s: %w", name, err)
	}
	return nil
}

// node is a Node object with a podCIDR.
func node(name string, podCIDR netip.Prefix, annotations map[string]string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec:       corev1.NodeSpec{PodCIDR: podCIDR.String(), PodCIDRs: []string{podCIDR.String()}},
	}
}

// resetOwn deletes the Node of the node under test, with what a daemon wrote on it, and
// creates it again as a new node's kubelet and kube-controller-manager leave it: its podCIDR
// and the kubelet's annotation. (flanneld v0.28 panics on a Node without annotations: it
// writes into the map without making one.)
func (k *kubePeers) resetOwn(ctx context.Context, name string) error {
	err := k.cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Node %s: %w", name, err)
	}
	if _, err := k.cs.CoreV1().Nodes().Create(ctx, node(name, ownKubeSubnet(),
		map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"}), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Node %s: %w", name, err)
	}
	return nil
}
