package perf

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/weftnet/weft/internal/kubetest"
)

// TestStreamNodes: the stream floor counts every Node a real kube-apiserver holds, and ends
// at the bookmark that ends the initial events, not at the watch's end (which would take
// the server's watch timeout, minutes).
func TestStreamNodes(t *testing.T) {
	srv := kubetest.Start(t, kubetest.Options{})
	cs, err := kubernetes.NewForConfig(srv.Admin())
	if err != nil {
		t.Fatal(err)
	}
	peers, err := newKubePeers(cs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 120
	if err := peers.create(ctx, 1, n); err != nil {
		t.Fatal(err)
	}
	got, err := streamNodes(ctx, srv.Admin())
	if err != nil {
		t.Fatal(err)
	}
	if got.nodes != n {
		t.Errorf("streamed %d Nodes, the API server holds %d", got.nodes, n)
	}
	if got.took <= 0 || got.took > 30*time.Second {
		t.Errorf("the stream took %v: it did not end at the initial events' end", got.took)
	}
	// Without Nodes, the stream is its bookmark alone.
	if err := cs.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err = streamNodes(ctx, srv.Admin()); err != nil || got.nodes != 0 {
		t.Errorf("with no Nodes: streamed %d, err %v", got.nodes, err)
	}
}
