"""ingress/agents"""
