// Package cni is weft's CNI plugin, the logic behind cmd/weft: a meta-plugin that reads the
// node's subnet.env and hands the pod to a delegate plugin (bridge with host-local IPAM on
// Linux, win-overlay or win-bridge on Windows).
//
// It accepts flannel's CNI configuration keys and builds the delegate configuration flannel's
// plugin would, so that an existing flannel configuration needs only its "type" changed, and
// keeps each container's delegate configuration where flannel does, so that a node can switch
// from flannel to weft (or back) with pods running. On top of flannel it implements CHECK and
// STATUS, and answers a missing, half-written or changed subnet.env with a CNI error that
// names the file. On Windows it refuses at once to hand a pod in containerd's namespace to
// win-overlay or win-bridge without "apiVersion": 2, where they would fail it later with an
// error that names neither the configuration nor the fix.
//
// Everything here is OS-neutral: the Linux and Windows flavours of the delegate are chosen by
// an argument, so both are tested everywhere. Running delegates is left to a Delegator (the
// command uses the CNI library's invoke package).
package cni
