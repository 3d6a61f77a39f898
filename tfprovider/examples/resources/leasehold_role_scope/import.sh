# A role scope is imported by its role's name.
terraform import leasehold_role_scope.payments team_payments
