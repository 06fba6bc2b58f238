// Package e2e holds weft's end-to-end tests: clusters of real weftd nodes in network
// namespaces on this machine (see package cluster), pods made by the real CNI plugins, and
// real packets between them, for each backend. The tests need root and Linux; elsewhere
// this package is empty.
package e2e
