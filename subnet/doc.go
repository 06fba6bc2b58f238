// Package subnet holds the data every part of weft shares about the cluster network: the
// network configuration (flannel's net-conf.json), node leases and their JSON form, the lease
// key format of the etcd layout, the subnet allocator, subnet.env, and the Manager interface
// through which a datastore (etcd or the Kubernetes API) hands out and watches leases.
//
// Everything here is pure and OS-neutral; datastores live in the sub-packages.
package subnet
