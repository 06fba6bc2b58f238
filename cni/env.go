package cni

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/weftnet/weft/subnet"
)

// ReadEnv reads subnet.env for a pod. Besides what subnet.ParseEnv checks, it requires what
// flannel's plugin requires: a network and a subnet (IPv4 or IPv6), FLANNEL_MTU and
// FLANNEL_IPMASQ; a file without them is taken for a half-written one. Errors are *Error
// naming the file: types.ErrTryAgainLater if it does not exist (weftd has not written it
// yet), types.ErrIOFailure if it cannot be read, types.ErrDecodingFailure if it is
// malformed or incomplete.
func ReadEnv(path string) (subnet.Env, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return subnet.Env{}, &Error{Code: types.ErrTryAgainLater,
			Msg: "weftd has not written subnet.env yet (is it running?)", Err: err}
	}
	if err != nil {
		return subnet.Env{}, &Error{Code: types.ErrIOFailure, Msg: "reading subnet.env " + path, Err: err}
	}
	env, err := subnet.ParseEnv(data)
	if err != nil {
		return subnet.Env{}, &Error{Code: types.ErrDecodingFailure, Msg: fmt.Sprintf("subnet.env %s is malformed", path), Err: err}
	}
	if missing := missingEnvKeys(data, env); len(missing) > 0 {
		return subnet.Env{}, &Error{Code: types.ErrDecodingFailure,
			Msg: fmt.Sprintf("subnet.env %s is incomplete (half-written?): no %s", path, strings.Join(missing, ", "))}
	}
	return env, nil
}

// missingEnvKeys lists what flannel's plugin requires and env lacks. MTU and IPMASQ are
// looked for in data, since their zero values are valid.
func missingEnvKeys(data []byte, env subnet.Env) []string {
	have := envKeys(data)
	var missing []string
	if !env.Network.IsValid() && !env.IPv6Network.IsValid() {
		missing = append(missing, "FLANNEL_NETWORK or FLANNEL_IPV6_NETWORK")
	}
	if !env.Subnet.IsValid() && !env.IPv6Subnet.IsValid() {
		missing = append(missing, "FLANNEL_SUBNET or FLANNEL_IPV6_SUBNET")
	}
	for _, key := range []string{"FLANNEL_MTU", "FLANNEL_IPMASQ"} {
		if !have[key] {
			missing = append(missing, key)
		}
	}
	return missing
}

// envKeys returns the keys set in subnet.env content, read the way subnet.ParseEnv reads it.
func envKeys(data []byte) map[string]bool {
	keys := map[string]bool{}
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if key, _, ok := strings.Cut(line, "="); ok {
			keys[strings.TrimSpace(key)] = true
		}
	}
	return keys
}
