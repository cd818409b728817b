# The standing mutant set: each mutant and the named test that must catch
# it (docs/testing.md has the same table with what each mutant breaks).
#   oncegate_mutant_killed_by(NAME [--exit N] [VAR=VALUE...] -- COMMAND...)
# @mutant, @product and @python are replaced by expect_killed.py.
set(powerloss_test
  @python -m unittest
  test_powerloss.PowerlossTest.test_no_acknowledged_claim_is_lost_across_power_cuts)

# Commits without fsync: the power cut loses acknowledged claims.
oncegate_mutant_killed_by(skip-fsync
  ONCEGATE_POWERLOSS_BIN=@mutant ONCEGATE_BIN=@product
  ONCEGATE_POWERLOSS_CYCLES=10 -- ${powerloss_test})

# Answers a claim when queued, commits on the next mailbox turn.
oncegate_mutant_killed_by(quiet-ack
  ONCEGATE_POWERLOSS_BIN=@mutant ONCEGATE_BIN=@product
  ONCEGATE_POWERLOSS_CYCLES=10 -- ${powerloss_test})

# Answers a claim 100 ms before its commit: the crash-loop drill sees
# duplicate executions and lost acknowledged decisions (exit 1).
oncegate_mutant_killed_by(ack-before-commit --exit 1 --
  @python ${PROJECT_SOURCE_DIR}/tools/oncegate-drill single-node-crash-loop
  --bin @mutant --json ${CMAKE_CURRENT_BINARY_DIR}/mutant.ack-before-commit.json
  --set faults.repeat=10 --seed 18 --quiet)
set_tests_properties(mutant.ack-before-commit PROPERTIES
  RESOURCE_LOCK oncegate_drills)
