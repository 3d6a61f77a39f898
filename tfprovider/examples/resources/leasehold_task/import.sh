# A task is imported by its name. Durations are imported as leasehold
# prints them (1m30s, 10m): a configuration that spells one differently
# (90s) plans one in-place update after the import, which writes nothing.
terraform import leasehold_task.prune telescope:prune
