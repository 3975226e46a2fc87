"""Tools, the registry that holds them, their schemas and provider formats."""

from toolq.execution.context import ToolContext
from toolq.registry.registry import Category, ToolRegistry
from toolq.registry.tool import FunctionTool, FunctionToolOptions, Tool

__all__ = ["Category", "FunctionTool", "FunctionToolOptions", "Tool", "ToolContext", "ToolRegistry"]
