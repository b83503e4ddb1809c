"""Models are served by pools of deployments (CONTRACT section 7).

Each model's provider and fallbacks become its deployments at priorities 1, 2, 3… in that
order, all under the model's upstream name, one per provider (a provider had one secret):
the pool routes exactly as the chain did. A fallback listed twice, or naming the model's
own provider, is kept once. Going back keeps the first deployment as the provider and the
others, by priority, as fallbacks.
"""
import django.db.models.deletion
from django.db import migrations, models


def pools_from_providers(apps, schema_editor):
    AiModel = apps.get_model("models_catalog", "AiModel")
    Provider = apps.get_model("models_catalog", "Provider")
    Deployment = apps.get_model("models_catalog", "Deployment")
    providers = {provider.name: provider for provider in Provider.objects.all()}
    for model in AiModel.objects.all():
        chain = [model.provider]
        for name in model.fallbacks or []:
            provider = providers.get(name)
            if provider is not None and provider not in chain:
                chain.append(provider)
        for priority, provider in enumerate(chain, start=1):
            Deployment.objects.create(model=model, provider=provider, secret_env=provider.api_key_env,
                                      upstream_model=model.upstream_model, priority=priority)


def pools_to_providers(apps, schema_editor):
    AiModel = apps.get_model("models_catalog", "AiModel")
    Deployment = apps.get_model("models_catalog", "Deployment")
    for model in AiModel.objects.all():
        pool = list(Deployment.objects.filter(model=model).select_related("provider").order_by("priority", "id"))
        if not pool:
            continue
        model.provider = pool[0].provider
        model.upstream_model = pool[0].upstream_model
        model.fallbacks = list(dict.fromkeys(d.provider.name for d in pool[1:] if d.provider_id != model.provider_id))
        model.save(update_fields=["provider", "upstream_model", "fallbacks"])


class Migration(migrations.Migration):

    dependencies = [
        ('models_catalog', '0004_usage_single_column_indexes_dropped'),
    ]

    operations = [
        migrations.CreateModel(
            name='Deployment',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('secret_env', models.CharField(blank=True, help_text="The variable holding this deployment's secret (one of the provider's); empty for a provider without one.", max_length=100)),
                ('upstream_model', models.CharField(blank=True, help_text="Name sent upstream; empty = the model's id.", max_length=120)),
                ('priority', models.PositiveSmallIntegerField(default=1, help_text='Lower is tried first.')),
                ('weight', models.PositiveIntegerField(default=1, help_text='Share of traffic within its priority; 0 = only as a last resort there.')),
                ('rpm', models.PositiveIntegerField(default=0, help_text='Requests per minute sent to it, fleet-wide (0 = no cap).')),
                ('disabled_at', models.DateTimeField(blank=True, null=True)),
                ('disabled_reason', models.CharField(blank=True, max_length=300)),
            ],
            options={
                'ordering': ['model', 'priority', 'id'],
            },
        ),
        migrations.AddField(
            model_name='aimodel',
            name='allowed_fails',
            field=models.PositiveSmallIntegerField(default=3, help_text='Failures of a deployment within 60 s that cool it down.'),
        ),
        migrations.AddField(
            model_name='aimodel',
            name='cooldown_seconds',
            field=models.PositiveIntegerField(default=30, help_text='How long a cooled deployment gets no traffic.'),
        ),
        migrations.AddField(
            model_name='aimodel',
            name='routing',
            field=models.CharField(choices=[('weighted', 'weighted'), ('latency', 'latency')], default='weighted', help_text='How a deployment is picked within a priority: by weight, or by the lowest recent time to first byte.', max_length=16),
        ),
        migrations.AddField(
            model_name='provider',
            name='api_key_envs',
            field=models.JSONField(blank=True, default=list, help_text='Names of several secret variables, each its own deployment (instead of api_key_env).'),
        ),
        migrations.AddField(
            model_name='provider',
            name='api_version',
            field=models.CharField(blank=True, help_text='Azure: the api-version sent.', max_length=40),
        ),
        migrations.AddField(
            model_name='provider',
            name='max_tokens_default',
            field=models.PositiveIntegerField(default=4096, help_text='Anthropic: max_tokens sent when the client gives none.'),
        ),
        migrations.AddField(
            model_name='usageevent',
            name='deployment_id',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='provider',
            name='type',
            field=models.CharField(choices=[('openai', 'openai'), ('azure', 'azure'), ('anthropic', 'anthropic'), ('gemini', 'gemini'), ('local', 'local')], default='openai', max_length=16),
        ),
        migrations.AddConstraint(
            model_name='aimodel',
            constraint=models.CheckConstraint(condition=models.Q(('routing__in', ('weighted', 'latency'))), name='aimodel_routing_known'),
        ),
        migrations.AddConstraint(
            model_name='aimodel',
            constraint=models.CheckConstraint(condition=models.Q(('allowed_fails__gte', 1)), name='aimodel_allowed_fails_positive'),
        ),
        migrations.AddField(
            model_name='deployment',
            name='model',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='deployments', to='models_catalog.aimodel'),
        ),
        migrations.AddField(
            model_name='deployment',
            name='provider',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='deployments', to='models_catalog.provider'),
        ),
        migrations.AddConstraint(
            model_name='deployment',
            constraint=models.UniqueConstraint(fields=('model', 'provider', 'secret_env', 'upstream_model'), name='deployment_once_per_model'),
        ),
        migrations.AddConstraint(
            model_name='deployment',
            constraint=models.CheckConstraint(condition=models.Q(('priority__gte', 1)), name='deployment_priority_positive'),
        ),
        migrations.RunPython(pools_from_providers, pools_to_providers),
        migrations.RemoveField(
            model_name='aimodel',
            name='fallbacks',
        ),
        migrations.RemoveField(
            model_name='aimodel',
            name='provider',
        ),
        migrations.RemoveField(
            model_name='aimodel',
            name='upstream_model',
        ),
    ]
