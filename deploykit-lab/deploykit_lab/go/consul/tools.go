//go:build tools

// Pins the Consul agent the lab builds with `go build github.com/hashicorp/consul`.
// Consul v1.16.3: the newest release of the last MPL-2.0 line (its LICENSE is MPL-2.0);
// 1.17+ is BUSL. Do not bump past 1.16.x.
package tools

import _ "github.com/hashicorp/consul"
