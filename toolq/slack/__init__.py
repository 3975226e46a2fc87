"""Approvals in Slack: Block Kit messages per parked call, buttons, reminders, digests.

Workers post and update the messages from the webhook outbox (``notifier``); the API takes
button presses at ``POST /v1/slack/interactions`` (``toolq.api.slack``), verified with the
app's signing secret (``interactions``). Needs the ``slack`` extra (``slack-sdk``).
"""
