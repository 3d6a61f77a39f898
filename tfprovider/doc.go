// Package tfprovider will hold terraform-provider-leasehold, the Terraform
// provider that declares tasks, their TTLs and retention policies through
// leasecore (see DESIGN.md, "Terraform provider"). It is built in its own
// issue; this file reserves the place in the layout.
package tfprovider
