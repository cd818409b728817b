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

# Answers a claim when queued, commits on the next mailbox turn (a claim a
# single node commits on the HTTP thread that asked is still answered after
# its commit: the cuts find the others).
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

# Ignores COMMIT's result: a claim whose commit failed is answered 200 (the
# test wants 503, nothing stored, one execution on retry).
oncegate_mutant_killed_by(ignore-commit-result -- @python -m unittest
  test_failures.CommitFailureTest.test_a_failed_commit_is_503_executes_nothing_and_the_retry_runs_once)

# Relays the upstream's answer although its outcome was not committed: the
# sender hears 200 while a resend hears 409 in flight.
oncegate_mutant_killed_by(relay-unrecorded -- @python -m unittest
  test_store_full.OutcomeUnrecordedTest.test_an_answer_the_store_cannot_keep_is_in_doubt_not_200)

# A reused key with another payload, decided by the store (cold caches after
# a restart), is granted and forwarded instead of 422.
oncegate_mutant_killed_by(grant-on-mismatch -- @python -m unittest
  test_key_reuse.ReuseAfterRestartTest.test_a_reused_key_after_a_restart_is_422_and_not_forwarded)

# An upstream connect timeout classified "maybe sent": the key turns in
# doubt instead of being released for the sender's retry.
oncegate_mutant_killed_by(connect-timeout-in-doubt -- @python -m unittest
  test_unreachable.ConnectTimeoutTest.test_a_connect_timeout_is_not_sent_and_the_retry_executes)

# A TLS handshake that failed (a certificate for another name) classified
# "maybe sent": the key turns in doubt (502) although no byte of the
# request left, instead of 503 and a retry that executes.
oncegate_mutant_killed_by(tls-handshake-in-doubt -- @python -m unittest
  test_https_upstream.HttpsUpstreamTest.test_a_certificate_for_another_name_is_not_sent)

# Logs every claim's body: a marker from the body shows up in the log.
oncegate_mutant_killed_by(log-request-body -- @python -m unittest
  test_logging.NoSecretsInLogsTest.test_no_body_or_secret_reaches_a_text_log_at_trace_level)

# Answers a cluster claim when proposed: with both followers stopped the
# leader answers 200 (the test wants 503 after the leader wait, nothing
# executed, the retry executed once after they resume).
oncegate_mutant_killed_by(answer-before-majority -- @python -m unittest
  test_cluster_faults.FaultsTest.test_a_claim_without_a_majority_is_never_answered_200)

# Keeps cached records across a change of leadership: a leader regained
# answers 409 from its cache for keys an operator released meanwhile.
oncegate_mutant_killed_by(skip-key-reset -- @python -m unittest
  test_cluster_faults.FaultsTest.test_a_leader_regained_answers_from_the_current_state)

# A leadership retry carries another request id: a claim that committed
# while its answer was lost is taken for a stranger's (409, stranded).
oncegate_mutant_killed_by(drop-request-id -- @python -m unittest
  test_cluster_faults.FaultsTest.test_a_claim_committed_while_its_answer_was_lost_is_ours)

# A reconcile URL's 4xx other than 404 (429, 401, 403, 410) read as "the
# order is absent": the in-doubt key is delivered a second time.
oncegate_mutant_killed_by(reconcile-4xx-absent -- @python -m unittest
  test_delivery.DeliveryTest.test_only_a_404_of_the_reconcile_url_means_absent)

# The forward begins after the response timeout answered 503 ("nothing
# executed"): the upstream executes a signal its sender was told failed.
oncegate_mutant_killed_by(forward-after-timeout -- @python -m unittest
  test_limits.ResponseTimeoutTest.test_a_503_past_the_response_timeout_means_nothing_was_forwarded)
