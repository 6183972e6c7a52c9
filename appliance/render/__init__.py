"""Views of a ServePlan: shell, json, supervisord.conf, compose env, Kubernetes manifests."""

from appliance.render.plan import Placement, ServePlan, build_plan

__all__ = ["Placement", "ServePlan", "build_plan"]
