package kube

import "github.com/weftnet/weft/subnet"

// Annotations returns the annotations by which a node running flannel or weft publishes its
// lease attributes to its peers, under prefix (DefaultAnnotationPrefix when empty), for the
// families cfg enables. Tools that stand in for peers (the benchmark harness) put them on the
// Node objects they create, with the podCIDR as the subnet.
func Annotations(prefix string, cfg *subnet.Config, attrs subnet.LeaseAttrs) (map[string]string, error) {
	if prefix == "" {
		prefix = DefaultAnnotationPrefix
	}
	a, err := newAnnotations(prefix)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string)
	for k, v := range a.values(cfg, attrs) {
		if v != nil {
			out[k] = *v
		}
	}
	return out, nil
}
