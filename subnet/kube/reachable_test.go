package kube

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestUnreachable: a call that got no answer from the API server is waited out here, until
// the server answers again; an answer, whatever its status, and a cancelled call go to the
// reflector.
func TestUnreachable(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://192.0.2.1:6443/api/v1/nodes",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	nodes := schema.GroupResource{Resource: "nodes"}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{refused, true},
		{fmt.Errorf("list: %w", refused), true},
		{&url.Error{Op: "Get", URL: "https://192.0.2.1:6443/api/v1/nodes", Err: context.DeadlineExceeded}, true},
		{apierrors.NewResourceExpired("too old resource version"), false},
		{apierrors.NewForbidden(nodes, "", fmt.Errorf("no")), false},
		{apierrors.NewServiceUnavailable("starting"), false},
		{context.Canceled, false},
		{fmt.Errorf("watch: %w", context.Canceled), false},
	} {
		if got := unreachable(c.err); got != c.want {
			t.Errorf("unreachable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
