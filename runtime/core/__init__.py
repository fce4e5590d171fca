"""The pure core: the thread state model, actions, effects, the phase table and the
transition. No I/O, no clock, no randomness: time and ids come in the actions.
"""
