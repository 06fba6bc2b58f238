package hnssim

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// HNS's JSON schema, as hcsshim v0.15.0's hcn types write it (hcn/hcnnetwork.go,
// hcnendpoint.go, hcnnamespace.go, hcnpolicy.go, hcn.go). Objects weft's semantics depend on
// are decoded strictly; parts it never sends but hcn always writes (Health, MacPool, Dns:
// structs hcn marshals even when empty) are taken as any JSON.

type schemaVersion struct{ Major, Minor int }

type policy struct {
	Type     string
	Settings json.RawMessage
}

type route struct {
	NextHop           string
	DestinationPrefix string
	Metric            uint16
}

type subnetSchema struct {
	IpAddressPrefix string //nolint:revive // HNS's spelling
	Policies        []json.RawMessage
	Routes          []route
	Flags           uint32
}

type ipamSchema struct {
	Type    string
	Subnets []subnetSchema
}

type networkSchema struct {
	ID            string
	Name          string
	Type          string
	Policies      []policy
	MacPool       json.RawMessage
	Dns           json.RawMessage //nolint:revive // HNS's spelling
	Ipams         []ipamSchema
	Flags         uint32
	Health        json.RawMessage
	SchemaVersion schemaVersion
}

type ipConfig struct {
	IpAddress    string //nolint:revive // HNS's spelling
	PrefixLength uint8
}

type endpointSchema struct {
	ID                   string
	Name                 string
	HostComputeNetwork   string
	HostComputeNamespace string
	Policies             []policy
	IpConfigurations     []ipConfig //nolint:revive // HNS's spelling
	Dns                  json.RawMessage
	Routes               []route
	MacAddress           string
	Flags                uint32
	Health               json.RawMessage
	SchemaVersion        schemaVersion
}

type namespaceResource struct {
	Type string
	Data json.RawMessage
}

type namespaceSchema struct {
	ID            string
	NamespaceId   uint32 //nolint:revive // HNS's spelling
	Type          string
	Resources     []namespaceResource
	SchemaVersion schemaVersion
}

// modifyRequest is a network's, endpoint's or namespace's modify request.
type modifyRequest struct {
	ResourceType string
	RequestType  string
	Settings     json.RawMessage
}

type policyRequest struct {
	Policies []policy
}

// query is HostComputeQuery; Filter is a JSON object of strings, itself.
type query struct {
	SchemaVersion schemaVersion
	Flags         uint32
	Filter        string
}

// strict decodes s into v, refusing unknown fields, trailing data and wrong shapes, as
// HNS's schema does.
func strict(s string, v any) error {
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%T: %w", v, err)
	}
	if dec.More() {
		return fmt.Errorf("%T: data after the object", v)
	}
	return nil
}

// checkPolicies decodes each policy's settings strictly by its type's schema, for the
// types weft sends; others only need to be JSON objects.
func checkPolicies(ps []policy) error {
	for _, p := range ps {
		var v any
		switch p.Type {
		case "NetAdapterName":
			v = &struct{ NetworkAdapterName string }{}
		case "ProviderAddress":
			v = &struct{ ProviderAddress string }{}
		case "DrMacAddress":
			v = &struct{ Address string }{}
		case "RemoteSubnetRoute":
			v = &struct {
				DestinationPrefix           string
				IsolationId                 uint16 //nolint:revive // HNS's spelling
				ProviderAddress             string
				DistributedRouterMacAddress string
			}{}
		case "HostRoute":
			v = &struct{}{}
		case "VSID":
			v = &struct{ IsolationId uint32 }{} //nolint:revive // HNS's spelling
		default:
			v = &map[string]any{}
		}
		settings := string(p.Settings)
		if settings == "" {
			settings = "{}"
		}
		if err := strict(settings, v); err != nil {
			return fmt.Errorf("%s policy: %w", p.Type, err)
		}
	}
	return nil
}

func checkNetwork(n *networkSchema) error {
	if err := checkPolicies(n.Policies); err != nil {
		return err
	}
	for _, ipam := range n.Ipams {
		for _, sn := range ipam.Subnets {
			for _, raw := range sn.Policies {
				var p policy
				if err := strict(string(raw), &p); err != nil {
					return fmt.Errorf("subnet policy: %w", err)
				}
				if err := checkPolicies([]policy{p}); err != nil {
					return fmt.Errorf("subnet %s: %w", sn.IpAddressPrefix, err)
				}
			}
		}
	}
	return nil
}
