# A policy is imported by its name. Importing "default" lets Terraform
# change the default policy, which can never be deleted.
terraform import leasehold_retention_policy.audit audit
