//go:build tools

// Pins the Consul agent the lab builds with `go build github.com/hashicorp/consul`.
// Consul v1.16.1 is the last MPL-2.0 release line deploykit uses; 1.17+ is BUSL. Do not bump past 1.16.x.
package tools

import _ "github.com/hashicorp/consul"
