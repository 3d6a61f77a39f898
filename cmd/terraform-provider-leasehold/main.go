// Command terraform-provider-leasehold is leasehold's Terraform provider
// (package tfprovider). Terraform starts it; run it with -debug to attach a
// debugger and point Terraform at it with TF_REATTACH_PROVIDERS; -address
// prints the provider's full address (which a filesystem mirror's layout
// needs) and exits.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/leasehold/leasehold/tfprovider"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	var debug, address bool
	flag.BoolVar(&debug, "debug", false, "serve with support for debuggers such as delve, printing TF_REATTACH_PROVIDERS for Terraform")
	flag.BoolVar(&address, "address", false, "print the provider's full address and exit")
	flag.Parse()
	if address {
		fmt.Println(tfprovider.Address)
		return
	}

	err := providerserver.Serve(context.Background(), tfprovider.New(version), providerserver.ServeOpts{
		Address:         tfprovider.Address,
		Debug:           debug,
		ProtocolVersion: 6,
	})
	if err != nil {
		log.Fatal(err)
	}
}
