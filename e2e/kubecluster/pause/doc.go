// Command pause is the sandbox process of the kubecluster nodes' pods: it holds the pod's
// namespaces open, does nothing else, reaps the children that end up with it (it is the
// pod's PID 1 when the pod shares its process namespace) and exits on SIGINT or SIGTERM, as
// Kubernetes' own pause does. The harness builds it into the image named PauseImage, which no
// registry serves here.
package main
