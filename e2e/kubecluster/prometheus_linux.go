package kubecluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// weftMetricsPort is the weft DaemonSet's metrics port (dist/kubernetes/weft.yaml).
const weftMetricsPort = 8285

// promListen is where the cluster's Prometheus listens, inside the underlay.
const promListen = "127.0.0.1:9090"

// Prometheus is a Prometheus server of the cluster, in the underlay.
type Prometheus struct {
	http *http.Client
}

// PromSample is one series of an instant vector.
type PromSample struct {
	Metric map[string]string
	Value  string
}

// StartPrometheus starts Debian's prometheus (tools/install-prometheus.sh) in the underlay,
// scraping job "weft": every node's address on the weft DaemonSet's metrics port, 8285. The
// README's weft-k8s job finds the same targets through the API server, but Debian builds
// Prometheus without Kubernetes discovery ("field kubernetes_sd_configs not found"): the
// targets are the nodes' InternalIPs that discovery would give. It is stopped with the
// cluster.
func (c *Cluster) StartPrometheus(ctx context.Context) (*Prometheus, error) {
	dir := filepath.Join(c.net.Dir(), "control-plane", "prometheus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kubecluster: %w", err)
	}
	var targets []string
	for _, n := range c.nodes {
		targets = append(targets, fmt.Sprintf("'%s'", netip.AddrPortFrom(n.IP, weftMetricsPort)))
	}
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
scrape_configs:
  - job_name: weft
    scrape_timeout: 1s
    static_configs:
      - targets: [%s]
`, strings.Join(targets, ", "))
	confPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, fmt.Errorf("kubecluster: %w", err)
	}
	server, err := exec.LookPath("prometheus")
	if err != nil {
		return nil, fmt.Errorf("kubecluster: %w (tools/install-prometheus.sh installs it)", err)
	}
	p, err := start("prometheus", filepath.Join(dir, "prometheus.log"), nil,
		append(c.net.UnderlayCommand(), server, "--config.file="+confPath,
			"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promListen))
	if err != nil {
		return nil, fmt.Errorf("kubecluster: %w", err)
	}
	c.extra = append(c.extra, p)
	prom := &Prometheus{http: &http.Client{Timeout: 5 * time.Second,
		Transport: &http.Transport{DialContext: c.net.DialUnderlay, DisableKeepAlives: true}}}
	for {
		resp, err := prom.http.Get("http://" + promListen + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return prom, nil
			}
		}
		if p.exited() {
			return nil, fmt.Errorf("kubecluster: prometheus exited; log %s:\n%s", p.logPath, p.tail())
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kubecluster: prometheus not ready (%v): %w", err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Query evaluates an instant PromQL query.
func (p *Prometheus) Query(ctx context.Context, q string) ([]PromSample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+promListen+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return nil, fmt.Errorf("prometheus query %s: %w", q, err)
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("prometheus query %s: %w", q, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string
		Error  string
		Data   struct {
			Result []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("prometheus query %s: %w", q, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("prometheus query %s: %s", q, body.Error)
	}
	out := make([]PromSample, 0, len(body.Data.Result))
	for _, r := range body.Data.Result {
		v, _ := r.Value[1].(string)
		out = append(out, PromSample{Metric: r.Metric, Value: v})
	}
	return out, nil
}
