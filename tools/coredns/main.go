// Command coredns is CoreDNS with only the plugins the local cluster's DNS needs (cluster.local names of
// Services, headless ones included, and pods), built from the pinned module in go.mod: the stock build
// links every plugin (cloud SDKs among them), which costs far more to compile on this machine.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	// The order in which the plugins handle a query (upstream's plugin.cfg order, restricted to ours).
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes"}
}

func main() { coremain.Run() }
