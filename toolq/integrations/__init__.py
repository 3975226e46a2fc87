"""Adapters that make toolq the tool backend of agent frameworks.

``toolq.integrations.pydantic_ai`` (extra ``pydantic-ai``), ``toolq.integrations.openai_agents``
(extra ``openai-agents``) and ``toolq.integrations.langchain`` (extra ``langchain``) each import
their framework; this package and ``import toolq`` import none.
"""
