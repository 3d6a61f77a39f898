terraform {
  required_providers {
    leasehold = {
      source = "leasehold/leasehold"
    }
  }
}

# The store the sidecars use. Leave store out to read LEASEHOLD_STORE,
# which keeps a PostgreSQL password out of the configuration.
provider "leasehold" {
  store = "sqlite:/var/lib/leasehold/leasehold.db"
}
