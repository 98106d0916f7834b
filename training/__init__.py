"""Training the learned policies: PPO, the reward, the teacher and the Gymnasium environments.

It sits above both the decision core (``attentived.agents``, whose networks and policies it
trains) and the simulator (whose engine its environments step), and nothing below imports it.

Importing it registers the two-phase environment with Gymnasium as `ENV_ID`, so
``gymnasium.make("attentived/Scheduling-v0", **kwargs)`` builds an
`attentived.training.gym_env.SchedulingEnv` (see that module). Gymnasium 1.x loads no
plugins from package entry points, so registering on import is the documented way; the
entry point is a string, so the environment's module loads only when one is made.
"""

import gymnasium

ENV_ID = "attentived/Scheduling-v0"

gymnasium.register(id=ENV_ID, entry_point="attentived.training.gym_env:SchedulingEnv")
