package kubetest

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
)

// FailDenied returns a copy of rc whose every request the API server refuses
// (401 or 403) fails the test when it ends, even one that client-go retries
// away (an informer lists again on its own): a client that must be allowed all
// it does, such as weftd under dist's RBAC, shows any permission it lacks. Call
// it before starting what uses the config, so that the check runs after that
// has stopped.
func FailDenied(t testing.TB, rc *rest.Config) *rest.Config {
	t.Helper()
	var mu sync.Mutex
	var denied []string
	rc = rest.CopyConfig(rc)
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
				mu.Lock()
				denied = append(denied, req.Method+" "+req.URL.RequestURI()+": "+resp.Status)
				mu.Unlock()
			}
			return resp, err
		})
	})
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if len(denied) > 0 {
			t.Errorf("the API server refused:\n%s", strings.Join(denied, "\n"))
		}
	})
	return rc
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
